"""The built-in stage implementations, their versions and fingerprints, known without importing them.

`plan` needs every stage's key, and a key holds its implementation's name, version and toolchain
fingerprint; importing the modules that hold the implementations only to read those costs a third of
a no-op's start-up (onnx, numpy, the runners). This table says the same from data: a test
(tests/backends/test_impl_table.py) checks every entry against the real class, so a version bumped in
a module and not here fails the suite instead of going stale. An entry whose fingerprint has no
recipe here (managed environments, SDK probes) is read from its module, as is every plug-in.

A fingerprint recipe is a tuple of parts merged in order: ("dist", name) is {name: the installed
version or "missing"}; ("call", "module:function", prefix) is that light function's dict, its keys
prefixed.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import Any

Recipe = tuple[tuple[str, ...], ...]
Entry = tuple[str, str, Recipe | None]
"""(module.Class, version, fingerprint recipe or None)."""

_ONNX = ("dist", "onnx")
_NUMPY = ("dist", "numpy")
_ORT = ("dist", "onnxruntime")

SHARED: dict[str, Entry] = {
    "import": ("backends.onnx.importer.ImportPass", "2", (_ONNX,)),
    "check": ("backends.onnx.check.CheckPass", "1", (_ONNX, _NUMPY)),
    "rewrite": ("backends.onnx.rewrite.RewritePass", "1", (_ONNX, _ORT, _NUMPY)),
    "preprocess": ("backends.onnx.preprocess.PreprocessPass", "1", (_ONNX, _ORT, _NUMPY)),
    "quantize": ("backends.onnx.quantize.QuantizePass", "4", (_ONNX, _ORT, _NUMPY)),
}
"""The shared ONNX passes (backends.onnx), used for every stage a backend does not implement."""

_ORT_FP = ("call", "backends.onnxruntime:fingerprint", "")
_OV_FP = ("call", "backends.openvino:fingerprint", "")
_QNN_FP = ("call", "backends.qnn:fingerprint", "")

OWN: dict[str, dict[str, Entry]] = {
    "onnxruntime": {
        "compile": ("backends.onnxruntime._compile.CompilePass", "2", (_ORT_FP,)),
        "evaluate": ("backends.onnxruntime._evaluate.EvaluatePass", "5", (_ORT_FP,)),
    },
    "openvino": {
        "check": ("backends.openvino.check.OpenVinoCheck", "1-openvino", (_ONNX, _NUMPY, _OV_FP)),
        "quantize": (
            "backends.openvino.quantize.NncfQuantize",
            "2",
            (
                _OV_FP,
                ("dist", "onnx", "shared."),
                ("dist", "onnxruntime", "shared."),
                ("dist", "numpy", "shared."),
            ),
        ),
        "compile": ("backends.openvino.compile.OpenVinoCompile", "3", (_OV_FP,)),
        "evaluate": ("backends.openvino.evaluate.OpenVinoEvaluate", "6", (_OV_FP,)),
    },
    "rknn": {
        "preprocess": ("backends.rknn.preprocess.RknnPreprocess", "1", None),
        "quantize": ("backends.rknn.stages.RknnQuantize", "1", None),
        "compile": ("backends.rknn.stages.RknnCompile", "3", None),
        "evaluate": ("backends.rknn.stages.RknnEvaluate", "7", None),
    },
    "qnn": {
        "check": ("backends.qnn.stages.QnnCheck", "1-qnn", (_ONNX, _NUMPY, _QNN_FP)),
        "preprocess": ("backends.qnn.adapter.QnnPreprocess", "1+record", None),
        "quantize": ("backends.qnn.stages.QnnQuantize", "1+record+htp3", None),
        "compile": ("backends.qnn.stages.QnnCompile", "2-epcontext", None),
        "evaluate": ("backends.qnn.evaluate.QnnEvaluate", "3-simulator", None),
    },
    "cann": {
        "preprocess": ("backends.cann.adapter.CannPreprocess", "1", (_ONNX, _ORT, _NUMPY)),
        "quantize": ("backends.cann.adapter.CannQuantize", "1+record", None),
        "compile": ("backends.cann.adapter.CannCompile", "1", None),
        "evaluate": ("backends.sdk.BundleEvaluate", "1", None),
    },
    "ethos-u": {
        "quantize": ("backends.tflite.stages.TfliteQuantize", "1-onnx2tf", None),
        "compile": ("backends.ethosu.vela.VelaCompile", "1-vela", None),
        "evaluate": ("backends.ethosu.vela.VelaEvaluate", "2-vela", None),
    },
    "mediatek": {
        "quantize": ("backends.tflite.stages.TfliteQuantize", "1-onnx2tf", None),
        "compile": ("backends.mediatek.compile.NccCompile", "1", None),
        "evaluate": ("backends.tflite.stages.TfliteEvaluate", "1-litert", None),
    },
    "coreml": {
        "quantize": ("backends.coreml.convert.CoreMlQuantize", "1-coreml-plan", None),
        "compile": ("backends.coreml.convert.CoreMlCompile", "2-coremltools", None),
        "evaluate": ("backends.coreml.convert.CoreMlEvaluate", "1", None),
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


def _dist(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "missing"


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
