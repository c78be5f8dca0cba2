"""The RKNN evaluate's per-layer profile: the simulator times nothing (eval_perf needs a board), so the
layers get the cost model's estimate (backends.profiles.estimated), named as one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backends.sdk.base import StageRequest


def estimated_profile(request: StageRequest) -> dict[str, Any] | None:
    """The simulator times nothing (eval_perf needs a board): the layers get the cost model's estimate,
    on the float ONNX the .rknn was built from, with the same suggestions a measured profile gets."""
    from backends.profiles.estimated import cost_model_profile
    from backends.profiles.suggest import suggest
    from backends.sdk.measure import float_model, placement

    placed = placement(request)
    why = "rknn-toolkit2's simulator gives no per-layer time (eval_perf needs a board)"
    profile = cost_model_profile(Path(request.inputs["float_model"]), placed, request.target, why)
    if profile is None:
        return None
    found = suggest(profile, request.target, float_model=float_model(request), precision=placed["precision"])
    for suggestion in found:
        suggestion["evidence"] = "estimated: the cost model's layer times, moved to the NPU's roofline"
    profile["suggestions"] = found
    return profile
