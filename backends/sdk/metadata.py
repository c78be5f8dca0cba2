"""JSON records carried inside an ONNX model's metadata_props.

A stage sees only the spec fields its key covers, so a vendor adapter that needs an earlier stage's
decision later (the preprocess form for QNN's --input_encoding, the sensitive layers for CANN's
keep_dtype) records it in the model it passes on: the record is then covered by the model's digest,
and so by every later key, with no change to the stage graph.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx


def put(model: onnx.ModelProto, key: str, value: Any) -> None:
    """Sets (replaces) one JSON record."""
    for prop in list(model.metadata_props):
        if prop.key == key:
            model.metadata_props.remove(prop)
    entry = model.metadata_props.add()
    entry.key, entry.value = key, json.dumps(value, sort_keys=True)


def get(model: onnx.ModelProto | Path, key: str) -> Any:
    """The JSON record under `key`, or None."""
    import onnx

    proto = onnx.load(str(model), load_external_data=False) if isinstance(model, Path) else model
    for prop in proto.metadata_props:
        if prop.key == key:
            return json.loads(prop.value)
    return None


def annotate(source: Path, dest: Path, records: dict[str, Any]) -> Path:
    """Copies the ONNX model `source` to `dest` with `records` added."""
    import onnx

    model = onnx.load(str(source), load_external_data=False)
    for key, value in records.items():
        put(model, key, value)
    onnx.save(model, str(dest))
    return dest
