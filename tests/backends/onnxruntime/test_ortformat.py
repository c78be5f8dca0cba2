"""The canonical .ort writer: its schema matches the installed ORT, and it round-trips real models."""

from __future__ import annotations

import re
from pathlib import Path

import onnxruntime
import pytest
from ort_helpers import compile_model

from backends.onnxruntime import _ortformat as fmt

GENERATED = Path(onnxruntime.__file__).parent / "tools" / "ort_format_model" / "ort_flatbuffers_py" / "fbs"


def _prepend(kind: str | None) -> str | None:
    """The generated builder's Prepend<X>Slot for a schema type (None: deprecated, not generated)."""
    if kind is None:
        return None
    if kind in ("float32", "float64"):
        return "Float32" if kind == "float32" else "Float64"
    if kind in fmt._SCALARS:
        return kind[:1].upper() + kind[1:]
    return "UOffsetTRelative"


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


@pytest.mark.parametrize("table", sorted(fmt.TABLES))
def test_schema_matches_the_installed_onnxruntime(table: str) -> None:
    source = (GENERATED / f"{table}.py").read_text()
    declared = re.search(rf"def {table}Start\(builder\):\s+builder\.StartObject\((\d+)\)", source)
    assert declared is not None
    assert int(declared.group(1)) == fmt._slots(table)
    slot = 0
    for field, kind in fmt.TABLES[table]:
        if kind is not None and kind.startswith("union:"):
            expected = [(f"{field}_type", "Uint8"), (field, "UOffsetTRelative")]
        else:
            expected = [(field, _prepend(kind))]
        for name, prepend in expected:
            if prepend is not None:
                add = re.search(
                    rf"def {table}Add{_camel(name)}\(builder, \w+\):\s+builder\.Prepend(\w+)Slot\((\d+),",
                    source,
                )
                assert add is not None, f"{table}.{name} not in the generated code"
                assert (add.group(1), int(add.group(2))) == (prepend, slot), f"{table}.{name}"
            slot += 1


def test_round_trip_is_lossless_and_idempotent(tmp_path: Path, cls_onnx: Path) -> None:
    data = compile_model(cls_onnx, tmp_path / "w", level=1).artifacts["ort"].read_bytes()
    content = fmt.read(data)
    assert fmt.canonical(fmt.read(data)) == content
    assert content["model"]["graph"]["nodes"]
    assert fmt.write(content) == data


def test_unknown_fields_are_refused(tmp_path: Path, cls_onnx: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = compile_model(cls_onnx, tmp_path / "w", level=1).artifacts["ort"].read_bytes()
    monkeypatch.setitem(fmt.TABLES, "Tensor", fmt.TABLES["Tensor"][:4])  # forget raw_data and string_data
    with pytest.raises(fmt.UnknownField, match="Tensor has fields beyond the 4"):
        fmt.canonical_bytes(data)


def test_not_an_ort_file() -> None:
    with pytest.raises(ValueError, match="ORTM"):
        fmt.read(b"\x00" * 16)
