"""Feeds for rknn-toolkit2's simulator and its outputs back, shared by compile (the int8 build checked
against its float source) and evaluate (accuracy). The sample folder sits outside the build folder:
its contents change the toolkit's bytes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.rknn import build as B

if TYPE_CHECKING:
    from backends.passes.accuracy import ModelOutputs
    from backends.passes.data import InputSpec, Sample


def request(samples: Sequence[Sample], raw: Sequence[InputSpec], meta: Any, sim: Path) -> dict[str, Any]:
    """Writes the samples in the model's layout into `sim`; the worker's `simulate` action for them."""
    import numpy as np

    sim.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, Any] = {}
    for i, sample in enumerate(samples):
        for j, spec in enumerate(raw):
            arrays[f"s{i:06d}_{j}"] = B.to_model_layout(sample.feed[spec.name], spec.name, meta)
    with (sim / "samples.npz").open("wb") as fh:
        np.savez(fh, **arrays)
    np.save(sim / "analysis_0.npy", arrays["s000000_0"])
    return {
        "samples": str(sim / "samples.npz"),
        "count": len(samples),
        "inputs": len(raw),
        "outputs": str(sim / "outputs.npz"),
    }


def reference(
    float_model: Path, samples: Sequence[Sample], raw: Sequence[InputSpec], meta: Any
) -> ModelOutputs:
    """The float ONNX under ONNX Runtime on the same samples, normalized as the toolkit normalizes."""
    from backends.passes import accuracy

    feeds = [{spec.name: B.normalized(s.feed[spec.name], spec.name, meta) for spec in raw} for s in samples]
    return accuracy.run_model(float_model, feeds)


def outputs(sim: Path, like: ModelOutputs, count: int) -> ModelOutputs:
    """The simulator's outputs, shaped as the float model's."""
    import numpy as np

    from backends.passes import accuracy

    found = accuracy.ModelOutputs(like.names)
    with np.load(sim / "outputs.npz") as archive:
        for i in range(count):
            found.values.append(
                [archive[f"s{i:06d}_{k}"].reshape(like.values[i][k].shape) for k in range(len(like.names))]
            )
    return found


@dataclass(frozen=True)
class CheckPlan:
    """The compile's check of its int8 build: the first few evaluation samples (random inputs, seed 0,
    without evaluation data) simulated after the build, scored against the float source in ONNX Runtime
    with the declared task (a detector's boxes, not the raw tensor's cosine) on the broken-model bound
    (RKNN's auto is the toolkit's auto_hybrid, not the spec's budget). A disagreement is a failed
    compile, never an accuracy drop."""

    samples: list[Sample]
    raw: list[InputSpec]
    sim: Path
    where: str
    after: dict[str, Any]
    """The worker's actions after the build (driver.run's `after`)."""

    @classmethod
    def make(cls, stage_request: Any, prep: B.Prepared, sim: Path) -> CheckPlan:
        from backends.passes import data
        from backends.sdk.artifact_check import CHECK_SAMPLES

        raw = B.raw_inputs(data.model_inputs(prep.onnx), prep.meta)
        folder = stage_request.inputs.get("eval_data")
        if folder is None:
            samples = data.random_samples(raw, CHECK_SAMPLES, seed=0)
            where = f"{CHECK_SAMPLES} random inputs (seed 0)"
        else:
            count = min(CHECK_SAMPLES, len(data.sample_files(Path(folder))))
            samples = data.load_samples(Path(folder), raw, count, 0, "evaluate.data", B.color_of(prep.meta))
            where = f"the first {count} samples of evaluate.data"
        after = {"simulate": request(samples, raw, prep.meta, sim)}
        return cls(list(samples), raw, sim, where, after)

    def check(self, stage_request: Any, prep: B.Prepared) -> dict[str, Any]:
        from backends.passes import accuracy
        from backends.passes.quant import check as quantize_check
        from backends.tasks.setup import declared

        want = reference(prep.onnx, self.samples, self.raw, prep.meta)
        task = declared({"task": stage_request.config.get("evaluate.task")}, stage_request.inputs, prep.onnx)
        got = outputs(self.sim, want, len(self.samples))
        scored = accuracy.score(got, want, task=task, samples=self.samples)
        record: dict[str, Any] = {
            "metric": f"{scored.task} {scored.metric}",
            "quantized": round(scored.accuracy, 6),
            "float": round(scored.reference, 6),
            "drop": round(scored.reference - scored.accuracy, 6),
            "data": f"{self.where} against the float model",
            "budget": quantize_check.BROKEN_DROP,
            "budget_from": "a broken model (no budget stated)",
        }
        return quantize_check.require(
            record,
            "compile: the rknn int8 build on the toolkit's simulator",
            quantize_check.advice(),
            stage_request.log,
        )
