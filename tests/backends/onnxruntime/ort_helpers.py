"""Helpers shared by the onnxruntime backend tests (imported by name: conftest modules are not)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from backends.catalog import target
from backends.sdk.base import StageOutput, StageRequest

FUSION_ON = {"conv_bn": True, "conv_activation": True, "matmul_add": True, "constant_folding": True}


def rapidocr_model(name: str) -> Path:
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    assert spec is not None and spec.submodule_search_locations
    return Path(spec.submodule_search_locations[0]) / "models" / name


def compile_request(
    model: Path, workdir: Path, level: int = 3, fusion: dict[str, bool] | None = None, **compile_cfg: Any
) -> StageRequest:
    workdir.mkdir(parents=True, exist_ok=True)
    config = {
        "target": "cpu",
        "compile": {"optimization_level": level, "batch": 1, "options": {}, **compile_cfg},
        "rewrite.fusion": {**FUSION_ON, **(fusion or {})},
        "quantization.mode": "none",
    }
    return StageRequest("compile", target("cpu"), config, {"model": model}, workdir, workdir / "compile.log")


def compile_model(
    model: Path, workdir: Path, level: int = 3, fusion: dict[str, bool] | None = None, **cfg: Any
) -> StageOutput:
    from backends.onnxruntime._compile import CompilePass

    return CompilePass().run(compile_request(model, workdir, level, fusion, **cfg))
