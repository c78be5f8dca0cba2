"""onnx2tf's TFLite checked against the ONNX model it came from, before the quantize stage records it.

The worker runs each written variant on a few samples (the first FEW calibration samples, or the
evaluation samples when the stage has them) and hands back its outputs; they are scored here with the
one accuracy implementation (backends.passes.accuracy.score, the spec's task and measure):
- float variants must compute the same function: on every sample, cosine >= FLOAT_COSINE or every
  output within FLOAT_ATOL x max(1, |reference|) (cosine means nothing on a near-empty map);
- quantized variants are held to the quantize check's broken-model bound (quantize_check.BROKEN_DROP
  of the task measure against the float model), not to a quality bar: the accuracy SLO is that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from backends.passes.quant.check import BROKEN_DROP, FEW, advice, require
from backends.sdk.errors import TerminalError

FLOAT_COSINE = {"float32": 0.999, "float16": 0.999}
FLOAT_ATOL = {"float32": 1e-4, "float16": 1e-2}
"""float16 stores weights in half precision (computes in float32): relative error ~1e-3."""


def write_samples(path: Path, samples: Sequence[Any], names: Sequence[str]) -> None:
    """The check samples, stacked per input in the ONNX layout, for the worker."""
    import numpy as np

    arrays: dict[str, Any] = {
        n: np.concatenate([np.asarray(s.feed[n], dtype=np.float32) for s in samples]) for n in names
    }
    np.savez(path, **arrays)


def outputs_of(npz: Path, variant: Mapping[str, Any], order: Sequence[str], count: int) -> Any:
    """The worker's saved outputs of one variant as accuracy.ModelOutputs in `order` (ONNX's)."""
    import numpy as np

    from backends.passes.accuracy import ModelOutputs

    stacked = np.load(npz)
    names = [o["onnx"] for o in variant["io"]["outputs"]]
    by_name = {name: stacked[f"out{k}"] for k, name in enumerate(names)}
    values = [[by_name[name][i] for name in order] for i in range(count)]  # the worker's np.stack
    return ModelOutputs(list(order), values)


def fidelity(got: Any, want: Any) -> dict[str, float]:
    """The worst sample's cosine and the largest |difference| over all samples and outputs."""
    import numpy as np

    worst, diff, top = 1.0, 0.0, 0.0
    for g, w in zip(got.values, want.values, strict=True):
        a = np.concatenate([np.ravel(x).astype(np.float64) for x in g])
        b = np.concatenate([np.ravel(x).astype(np.float64) for x in w])
        denom = float(np.linalg.norm(a) * np.linalg.norm(b))
        worst = min(worst, float(a @ b / denom) if denom else float(np.allclose(a, b)))
        if a.size:
            diff, top = max(diff, float(np.max(np.abs(a - b)))), max(top, float(np.max(np.abs(b))))
    return {"cosine": round(worst, 6), "max_abs_diff": diff, "max_abs_reference": top}


def run_checks(
    result: Mapping[str, Any],
    source: Path,
    samples: Sequence[Any],
    labels: Sequence[Any] | None,
    task: Any,
    data: str,
    log: Any = None,
) -> dict[str, dict[str, Any]]:
    """Per written variant: its fidelity and task score against the ONNX model; raises TerminalError
    naming the variant, both numbers and the bound when one is outside it."""
    from backends.passes import accuracy

    reference = accuracy.run_model(source, samples)
    checks: dict[str, dict[str, Any]] = {}
    for name, variant in result["variants"].items():
        saved = (result.get("check_outputs") or {}).get(name)
        if saved is None:
            continue
        got = outputs_of(Path(saved), variant, reference.names, len(samples))
        scored = accuracy.score(got, reference, labels, task, samples)
        record: dict[str, Any] = {
            **fidelity(got, reference),
            "metric": f"{scored.task} {scored.metric}",
            "score": round(scored.accuracy, 6),
            "float": round(scored.reference, 6),
            "drop": round(scored.reference - scored.accuracy, 6),
            "data": data,
            "samples": len(samples),
        }
        checks[name] = record
        if name in FLOAT_COSINE:
            bound = FLOAT_ATOL[name] * max(1.0, record["max_abs_reference"])
            record["bound"] = f"cosine >= {FLOAT_COSINE[name]} or max |diff| <= {bound:.3g}"
            if record["cosine"] < FLOAT_COSINE[name] and record["max_abs_diff"] > bound:
                raise TerminalError(
                    f"onnx2tf changed the model: {name} TFLite vs ONNX on {data}: worst cosine "
                    f"{record['cosine']:.5f} < {FLOAT_COSINE[name]} and max |diff| {record['max_abs_diff']:.4g} "
                    f"> {bound:.3g}"
                )
        else:
            record.update(quantized=record.pop("score"), budget=BROKEN_DROP)
            record["budget_from"] = "a broken model (no budget stated)"
            require(record, f"quantize: the {name} TFLite", advice(), log)
    return checks


def check_set(request: Any, source: Path, calibration: Sequence[Path]) -> Any:
    """The samples the checks run on: search_set's choice (evaluation data when the stage has it, else
    the first FEW calibration samples) with the spec's task and labels."""
    from backends.passes.quant.search_set import search_set

    return search_set(request.config, request.inputs, source, list(calibration)[:FEW], FEW)
