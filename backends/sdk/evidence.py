"""Evidence that names who measured: the rules every evaluate stage applies to its measurements.

`measured:device` only when the runtime ran on the target's own accelerator. A CPU runtime (ONNX
Runtime's CPU provider, OpenVINO's CPU plugin) measuring for a target with an NPU, here or on a board
reached over ssh/adb, is `measured:host` of that CPU, named; its latency and memory are marked
`on_target: false`, so verify never reads them as a pass of the NPU's SLO.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backends.catalog import Target
from backends.sdk.vocab import Evidence, EvidenceKind

TIMING = ("latency_ms.", "peak_memory_mb")


def cpu_name(result: Mapping[str, Any]) -> str:
    device = result.get("device") or {}
    return str(device.get("cpu") or "an unknown CPU") if isinstance(device, Mapping) else "an unknown CPU"


def about_host(measurements: dict[str, dict[str, Any]], target: Target, ran: str) -> None:
    """Marks runner measurements taken by a CPU runtime `ran` ("onnxruntime CPU on <cpu> via <where>")
    for `target` as evidence about that CPU (in place). A target without an NPU is a CPU target: its
    measurements keep the runner's evidence."""
    if target.npu_cores <= 0:
        return
    for key, measured in measurements.items():
        estimate = Evidence.parse(measured.get("evidence", "")).is_estimate
        if key in ("size_mb", "accuracy.reference") or estimate:
            continue
        measured["evidence"] = EvidenceKind.HOST.value
        if key.startswith(TIMING):
            measured["on_target"] = False
            measured["host"] = ran
            measured["detail"] = f"{ran}, not the {target.npu} of {target.id}; {measured.get('detail', '')}"
