"""The built-in stage implementations, their versions and fingerprints, known without importing them.

`plan` needs every stage's key, and a key holds its implementation's name, version and toolchain
fingerprint; importing the modules that hold the implementations only to read those costs a third of
a no-op's start-up (onnx, numpy, the runners). This table says the same from data: a test
(tests/backends/test_impl_table.py) checks every entry against the real class, so a version bumped in
a module and not here fails the suite instead of going stale. An entry whose fingerprint has no
recipe here (managed environments, SDK probes) is read from its module, as is every plug-in. The
version is not copied here (it changes with every fix): it is read from the class body in the
module's source by a line pattern, never imported; a version that is not a string literal there makes the
caller import the module.

A fingerprint recipe is a tuple of parts merged in order: ("dist", name) is {name: the installed
version or "missing"}; ("call", "module:function", prefix) is that light function's dict, its keys
prefixed.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from functools import cache
from typing import Any

from backends import dists

Recipe = tuple[tuple[str, ...], ...]
Entry = tuple[str, Recipe | None]
"""(module.Class, fingerprint recipe or None)."""

_ONNX = ("dist", "onnx")
_NUMPY = ("dist", "numpy")
_ORT = ("dist", "onnxruntime")

SHARED: dict[str, Entry] = {
    "import": ("backends.onnx.importer.ImportPass", (_ONNX,)),
    "check": ("backends.onnx.check.CheckPass", (_ONNX, _NUMPY)),
    "rewrite": ("backends.onnx.rewrite.RewritePass", (_ONNX, _ORT, _NUMPY)),
    "preprocess": ("backends.onnx.preprocess.PreprocessPass", (_ONNX, _ORT, _NUMPY)),
    "quantize": ("backends.onnx.quantize.QuantizePass", (_ONNX, _ORT, _NUMPY)),
}
"""The shared ONNX passes (backends.onnx), used for every stage a backend does not implement."""

_ORT_FP = ("call", "backends.onnxruntime:fingerprint", "")
_OV_FP = ("call", "backends.openvino:fingerprint", "")
_QNN_FP = ("call", "backends.qnn:fingerprint", "")

OWN: dict[str, dict[str, Entry]] = {
    "onnxruntime": {
        "quantize": (
            "backends.onnxruntime._quantize.HostQuantizePass",
            (_ONNX, _ORT, _NUMPY, ("call", "backends.host:int8_fingerprint", "")),
        ),
        "compile": ("backends.onnxruntime._compile.CompilePass", (_ORT_FP,)),
        "evaluate": ("backends.onnxruntime._evaluate.EvaluatePass", (_ORT_FP,)),
    },
    "openvino": {
        "check": ("backends.openvino.check.OpenVinoCheck", (_ONNX, _NUMPY, _OV_FP)),
        "quantize": (
            "backends.openvino.quantize.NncfQuantize",
            (
                _OV_FP,
                ("dist", "onnx", "shared."),
                ("dist", "onnxruntime", "shared."),
                ("dist", "numpy", "shared."),
            ),
        ),
        "compile": ("backends.openvino.compile.OpenVinoCompile", (_OV_FP,)),
        "evaluate": ("backends.openvino.evaluate.OpenVinoEvaluate", (_OV_FP,)),
    },
    "rknn": {
        "preprocess": ("backends.rknn.preprocess.RknnPreprocess", None),
        "quantize": ("backends.rknn.stages.RknnQuantize", None),
        "compile": ("backends.rknn.stages.RknnCompile", None),
        "evaluate": ("backends.rknn.stages.RknnEvaluate", None),
    },
    "qnn": {
        "check": ("backends.qnn.stages.QnnCheck", (_ONNX, _NUMPY, _QNN_FP)),
        "preprocess": ("backends.qnn.adapter.QnnPreprocess", None),
        "quantize": ("backends.qnn.stages.QnnQuantize", None),
        "compile": ("backends.qnn.stages.QnnCompile", None),
        "evaluate": ("backends.qnn.evaluate.QnnEvaluate", None),
    },
    "cann": {
        "preprocess": ("backends.cann.adapter.CannPreprocess", (_ONNX, _ORT, _NUMPY)),
        "quantize": ("backends.cann.adapter.CannQuantize", None),
        "compile": ("backends.cann.adapter.CannCompile", None),
        "evaluate": ("backends.sdk.BundleEvaluate", None),
    },
    "ethos-u": {
        "quantize": ("backends.tflite.stages.TfliteQuantize", None),
        "compile": ("backends.ethosu.vela.VelaCompile", None),
        "evaluate": ("backends.ethosu.vela.VelaEvaluate", None),
    },
    "mediatek": {
        "quantize": ("backends.tflite.stages.TfliteQuantize", None),
        "compile": ("backends.mediatek.compile.NccCompile", None),
        "evaluate": ("backends.tflite.stages.TfliteEvaluate", None),
    },
    "coreml": {
        "quantize": ("backends.coreml.convert.CoreMlQuantize", None),
        "compile": ("backends.coreml.convert.CoreMlCompile", None),
        "evaluate": ("backends.coreml.convert.CoreMlEvaluate", None),
    },
}
"""backend -> the stages it implements itself."""


def entry(backend: str, stage: str) -> tuple[Entry, bool] | None:
    """(the entry, whether it is the backend's own) for a built-in backend's stage; None when the
    stage has no implementation at all (compile and evaluate have no shared pass)."""
    own = OWN.get(backend, {}).get(stage)
    if own is not None:
        return own, True
    shared = SHARED.get(stage)
    return (shared, False) if shared is not None else None


@cache
def literal_version(qualified: str) -> str | None:
    """The class's `version = "..."`, read from its module's source without importing it (a line
    pattern, not a parse: cheap at start-up); None when it is not a plain string literal directly in
    the class body (then the caller imports the module)."""
    module, _, name = qualified.rpartition(".")
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if found is None or found.origin is None or not found.origin.endswith(".py"):
        return None
    try:
        with open(found.origin, encoding="utf-8") as fh:
            source = fh.read()
    except (OSError, ValueError):
        return None
    body = re.search(rf"^class {re.escape(name)}\b[^\n]*:\n((?:(?:[ \t]+[^\n]*)?\n)*)", source, re.M)
    if body is None:
        return None
    for line in body[1].splitlines():
        if re.match(r"^ {4}version\b", line):
            literal = re.match(r'^ {4}version(?:\s*:\s*str)?\s*=\s*"([^"\\]*)"\s*(?:#.*)?$', line)
            return literal[1] if literal else None
    return None


def _dist(name: str) -> str:
    return dists.version(name) or "missing"


def fingerprint(recipe: Recipe) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in recipe:
        if part[0] == "dist":
            prefix = part[2] if len(part) > 2 else ""
            out[prefix + part[1]] = _dist(part[1])
        else:
            module, _, function = part[1].partition(":")
            found: dict[str, Any] = getattr(importlib.import_module(module), function)()
            out.update({part[2] + k: v for k, v in found.items()})
    return out
