"""ONNX passes shared by every ONNX-based backend: import, check, rewrite, preprocess, quantize.

A backend that implements one of these stages itself (RKNN quantizes inside its own build) overrides
the shared pass; everything else starts from here (backends.registry). `SHARED` registers the passes
(backends.sdk.registration); their modules are imported only when their stage runs.
"""

from __future__ import annotations

from backends.sdk.registration import Dist, Registration, by_stage

ONNX, ORT, NUMPY = Dist("onnx"), Dist("onnxruntime"), Dist("numpy")

SHARED: dict[str, Registration] = by_stage(
    Registration(
        "import",
        name="backends.onnx.importer.ImportPass",
        version="3",
        ref="backends.passes.importer:ImportPass",
        fingerprint=(ONNX,),
    ),
    Registration(
        "check",
        name="backends.onnx.check.CheckPass",
        version="3",
        ref="backends.passes.check:CheckPass",
        fingerprint=(ONNX, NUMPY),
    ),
    Registration(
        "rewrite",
        name="backends.onnx.rewrite.RewritePass",
        version="3",
        ref="backends.passes.rewrite.stage:RewritePass",
        fingerprint=(ONNX, ORT, NUMPY),
    ),
    Registration(
        "preprocess",
        name="backends.onnx.preprocess.PreprocessPass",
        version="1",
        ref="backends.passes.preprocess.stage:PreprocessPass",
        fingerprint=(ONNX, ORT, NUMPY),
    ),
    Registration(
        "quantize",
        name="backends.onnx.quantize.QuantizePass",
        version="12",
        ref="backends.passes.quant.stage:QuantizePass",
        fingerprint=(ONNX, ORT, NUMPY),
    ),
)
"""The shared passes' registrations (backends.sdk.registration), by stage."""
