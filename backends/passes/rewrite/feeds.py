"""What rewrites are verified on: the spec's own samples, as the model before preprocessing reads them.

Calibration data first (quantization.calibration.data), else evaluation data (evaluate.data): real inputs
exercise the value ranges (and the masks, the token ids) the model was trained on, where seeded random
feeds may not. Samples are the app's inputs, so with a preprocess section they are raw frames: they go
through the section's canonical form (backends.passes.preprocess.plan.reference_input) to become what
the model before preprocessing takes. Where neither folder is given, or the raw frame's size is open,
there are no samples and the stage uses seeded feeds (backends.passes.rewrite.verify.seeded_feeds).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.passes import data

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from backends.passes.preprocess.plan import Plan
    from backends.sdk.base import StageRequest

Feed = tuple[str, dict[str, "np.ndarray"]]
"""A named feed: the sample's file name (or "random-0") and one array per model input."""

FOLDERS = (("calibration_data", "quantization.calibration.data"), ("eval_data", "evaluate.data"))
"""Request inputs that hold samples, in the order they are preferred, with their spec fields."""

SPARE = 2
"""Samples read per feed wanted: room for samples the float model answers with NaN/Inf."""


def feeds_for_request(
    request: StageRequest, model: onnx.ModelProto, count: int
) -> tuple[list[Feed] | None, str]:
    """Up to `count` x SPARE feeds from the spec's samples and where they come from; (None, reason)
    when there are none and seeded feeds stand in."""
    found = next(((request.inputs[k], field) for k, field in FOLDERS if request.inputs.get(k)), None)
    if found is None:
        return None, "seeded random feeds (the spec gives no calibration or evaluation data)"
    folder, field = Path(found[0]), found[1]
    pre = request.config.get("preprocess")
    plan = _plan(model, pre) if isinstance(pre, Mapping) else None
    inputs = data.model_inputs(model) if plan is None else _raw_inputs(model, plan)
    if inputs is None:
        return None, "seeded random feeds (the preprocess section leaves the raw frame's size open)"
    files = data.sample_files(folder)
    n = min(len(files), count * SPARE)
    color = _color(plan)
    samples = data.iter_samples(folder, inputs, n, seed=0, role=field, color=color)
    feeds = [(s.name, _model_feed(s.feed, plan)) for s in samples]
    return feeds, f"{field} ({folder.name})"


def _plan(model: onnx.ModelProto, pre: Mapping[str, Any]) -> Plan:
    from backends.passes.preprocess.plan import plan_for

    return plan_for(model, pre)


def _raw_inputs(model: onnx.ModelProto, plan: Plan) -> list[data.InputSpec] | None:
    """The model's inputs with the preprocessed one as the app feeds it; None when its size is open."""
    raw = plan.raw_shape
    if not all(isinstance(d, int) for d in raw):
        return None
    shape = tuple(int(d) for d in raw)
    return [
        data.InputSpec(i.name, shape, plan.dtype) if i.name == plan.input else i
        for i in data.model_inputs(model)
    ]


def _color(plan: Plan | None) -> data.Color | None:
    if plan is None or plan.color_from not in ("rgb", "bgr"):
        return None
    return "rgb" if plan.color_from == "rgb" else "bgr"


def _model_feed(feed: dict[str, np.ndarray], plan: Plan | None) -> dict[str, np.ndarray]:
    """A sample as the model before preprocessing takes it: the raw frame through the canonical form."""
    if plan is None:
        return feed
    from backends.passes.preprocess.plan import reference_input

    return {**feed, plan.input: reference_input(plan, feed[plan.input])}
