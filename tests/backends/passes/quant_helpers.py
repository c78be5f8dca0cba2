"""Shared by the quantize / calibration / sensitivity tests: the real digits example through the real
import stage, and a one-call runner for the quantize stage."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from backends.catalog import target
from backends.passes.importer import import_model
from backends.sdk.base import StageOutput, StageRequest

ROOT = Path(__file__).resolve().parents[3]
DIGITS = ROOT / "examples" / "digits"
DIGITS_CALIB = DIGITS / "data" / "calib"
DIGITS_EVAL = DIGITS / "data" / "eval"


@cache
def _digits_bytes() -> bytes:
    model, _ = import_model(DIGITS / "model.onnx", {"image": [1, 1, 8, 8]}, log=lambda _m: None)
    return bytes(model.SerializeToString(deterministic=True))


def digits_model(folder: Path) -> Path:
    """The digits example after the import stage: static [1, 1, 8, 8] input, opset >= 13."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "digits.onnx"
    path.write_bytes(_digits_bytes())
    return path


def ptq_config(samples: int = 64, **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "mode": "ptq",
        "weights": "int8",
        "per_channel": True,
        "calibration": {"data": "calib", "samples": samples, "method": "minmax", "seed": 0},
    }
    config.update(extra)
    return config


def run_quantize(
    config: Mapping[str, Any],
    model: Path,
    workdir: Path,
    calib: Path | None = DIGITS_CALIB,
    cache_dir: Path | None = None,
    target_id: str = "cpu",
    evaluate: Mapping[str, Any] | None = None,
    extra_inputs: Mapping[str, Path] | None = None,
    stage: Any = None,
) -> StageOutput:
    """The quantize stage on `model`; `evaluate` holds the `evaluate.*` fields the auto search reads
    (flat paths, e.g. {"evaluate.task": {...}}) and `extra_inputs` their files (eval_data, labels);
    `stage` another implementation than the shared pass (a backend's own)."""
    from backends.passes.quant.stage import QuantizePass

    workdir.mkdir(parents=True, exist_ok=True)
    inputs: dict[str, Path] = {"model": model, "float_model": model}
    if calib is not None:
        inputs["calibration_data"] = calib
    if cache_dir is not None:
        inputs["cache_dir"] = cache_dir
    inputs.update(extra_inputs or {})
    request = StageRequest(
        "quantize",
        target(target_id),
        {"quantization": json.loads(json.dumps(config)), "target": target_id, **dict(evaluate or {})},
        inputs,
        workdir,
        workdir / "quantize.log",
    )
    return (stage or QuantizePass()).run(request)


def eval_set() -> tuple[list[np.ndarray], list[int]]:
    """The 360 labelled evaluation digits."""
    labels: dict[str, int] = {}
    for line in (DIGITS_EVAL / "labels.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, label = line.rsplit(maxsplit=1)
            labels[name] = int(label)
    names = sorted(labels)
    return [np.load(DIGITS_EVAL / n).astype(np.float32).reshape(1, 1, 8, 8) for n in names], [
        labels[n] for n in names
    ]


def top1(model: Path, xs: list[np.ndarray], labels: list[int]) -> float:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    hits = sum(int(np.argmax(session.run(None, {name: x})[0]) == y) for x, y in zip(xs, labels, strict=True))
    return hits / len(labels)


def op_counts(model: Path) -> dict[str, int]:
    proto = onnx.load(str(model))
    counts: dict[str, int] = {}
    for node in proto.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def saved_with_calibration(
    graph: Any, opset: int, folder: Path, sample_shape: tuple[int, ...], count: int = 8
) -> tuple[Path, Path]:
    """`graph` saved at `opset` as folder/m.onnx, with `count` seeded normal samples of `sample_shape`
    in folder/calib: (model, calibration folder)."""
    from onnx import helper

    (folder / "calib").mkdir(parents=True)
    model = folder / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(model))
    rng = np.random.default_rng(1)
    for i in range(count):
        np.save(folder / "calib" / f"{i}.npy", rng.standard_normal(sample_shape).astype(np.float32))
    return model, folder / "calib"
