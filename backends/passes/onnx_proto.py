"""ONNX's protobuf messages without importing the onnx package.

Importing onnx costs about half a second (most of it registering ml_dtypes' numpy dtypes), and a
process that only reads a model's structure (validation's summary: inputs, nodes, opsets) needs the
generated message classes alone. Those live in `onnx/onnx_ml_pb2.py`, which imports only protobuf:
loaded from the installed package's file under a private name, they parse the same bytes the same way.
Once onnx itself is imported, its own classes are used (protobuf accepts the same file registered twice).
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

_PRIVATE_NAME = "backends.passes._onnx_ml_pb2"


def model_proto() -> Any:
    """The ModelProto class: onnx's own when onnx is imported, else the standalone module's."""
    onnx = sys.modules.get("onnx")
    if onnx is not None and hasattr(onnx, "ModelProto"):
        return onnx.ModelProto
    return _standalone().ModelProto


@functools.cache
def _standalone() -> ModuleType:
    spec = importlib.util.find_spec("onnx")  # a top-level package is found without running it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("onnx is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "onnx_ml_pb2.py"
    module_spec = importlib.util.spec_from_file_location(_PRIVATE_NAME, path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module
