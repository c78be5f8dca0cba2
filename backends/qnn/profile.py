"""The QNN HTP simulator's per-op cycles as a profile (backends.profiles) of the deployed model.

onnxruntime-qnn's `profiling_level: detailed` writes a CSV: per HTP op its simulated cycles, named after
the ONNX node it was built from ("/conv1/Conv_token_1:OpId_23", QNN's token suffix on ops it rewrote),
or after what QNN added itself (the graph's Input and Output, layout Transposes). Ops are tied to the
deployed model's nodes by that name; QNN's own stay `inserted`. The per-op cycles sum to the run's
"Accelerator (execute) time (cycles)". Nothing here is device time: cycles come from the simulator,
milliseconds from cycles at the catalog's HTP clock (an assumption: Qualcomm publishes none), so
shares and ranks hold at any clock and absolute milliseconds do not; the profile says so.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from backends.sdk.base import StageRequest

NOMINAL_CLOCK_HZ = 1e9
"""Milliseconds for a target whose catalog entry gives no htp_clock_mhz (the profile says so)."""

EVIDENCE = "estimated: QNN HTP simulator cycles"


def _clock(target: Any) -> tuple[float, str]:
    """The HTP clock the milliseconds are at, and what it rests on (backends.qnn.timing's catalog clock)."""
    from backends.qnn import timing

    mhz = timing.htp_clock_mhz(target)
    if mhz is None:
        return (
            NOMINAL_CLOCK_HZ,
            f"a nominal {NOMINAL_CLOCK_HZ / 1e6:g} MHz (the catalog gives no htp_clock_mhz)",
        )
    basis = str((target.extra.get("basis") or {}).get("htp_clock_mhz") or "basis not stated")
    return mhz * 1e6, f"the catalog's htp_clock_mhz {mhz:g} ({basis.split(';')[0]})"


QNN_OWN = frozenset({"Input", "Output", "Transpose", "Reshape", "Convert", "Cast"})
"""Ops QNN adds to the graph it builds (graph I/O, layout changes) when they are named after no node."""

_SUFFIX = re.compile(r"(?:_token_\d+)?(?::OpId_\d+| OpId_\d+)?$")


def read_profile(path: Path) -> dict[str, Any]:
    """Simulated cycles from QNN's detailed profile (CSV): the largest run's total (the latency
    estimate), and the last run's total with its per-op cycles (the profile)."""
    total: int | None = None
    last: int | None = None
    per_op: dict[str, int] = {}
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if row.get("Unit of Measurement") != "CYCLES":
                continue
            event, value = row.get("Event Identifier", ""), int(float(row.get("Time") or 0))
            if event == "Accelerator (execute) time (cycles)":
                total, last = value if total is None else max(total, value), value
                per_op = {}  # a later run's ops follow its total
            elif row.get("Event Level") == "SUB-EVENT" and event.endswith(" (cycles)"):
                per_op[event.removesuffix(" (cycles)")] = value  # keeps QNN's OpId: two ops may share a name
    return {"total": total, "last_total": last, "per_op": per_op}


PRECISION_EVIDENCE = (
    "inferred from the deployed graph the HTP compiled: QNN runs a Q/DQ node unit in the quantized type "
    "of its DequantizeLinear activation input, any other op in fp16 (the worker sets "
    "enable_htp_fp16_precision)"
)


def precisions(model: Any) -> dict[str, str]:
    """Node name -> the precision the HTP runs it in, read off the QDQ graph (PRECISION_EVIDENCE): the
    quantized type of its first (activation) input, else of any input, else fp16."""
    from onnx import helper

    init = {t.name: t.data_type for t in model.graph.initializer}
    quantized: dict[str, str] = {}  # a DequantizeLinear's output -> its quantized input's type
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear":
            source = node.input[2] if len(node.input) > 2 and node.input[2] else node.input[0]
            code = init.get(source)
            quantized[node.output[0]] = helper.tensor_dtype_to_np_dtype(code).name if code else "uint8"
    out = {}
    for node in model.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        activation = next((quantized[t] for t in node.input[:1] if t in quantized), None)
        kinds = sorted({quantized[t] for t in node.input if t in quantized})
        out[node.name] = activation or (kinds[0] if kinds else "fp16")
    return out


def cycle_rows(per_op: Mapping[str, int], model: Any) -> list[dict[str, Any]]:
    """QNN's ops as backends.profiles.cycles rows, named after the ONNX node (or tensor) they came from."""
    names = {n.name: n.op_type for n in model.graph.node}
    producer = {t: n.name for n in model.graph.node for t in n.output if t}
    rows = []
    for qnn_name, cycles in per_op.items():
        name = _SUFFIX.sub("", qnn_name)
        node = name if name in names else producer.get(name)
        word = re.split(r"[ _:]", name, maxsplit=1)[0]
        rows.append(
            {
                "name": name if node else qnn_name,
                "op": names[node] if node else word,
                "target": "NPU",
                "cycles": int(cycles),
                "inserted": node is None and word in QNN_OWN,
                "qnn_op": qnn_name,
            }
        )
    return rows


def qnn_profile(cycles: Mapping[str, Any], request: StageRequest, simulator: str) -> dict[str, Any] | None:
    """The profile of the simulated run, or None when the simulator wrote no per-op cycles."""
    import json

    import onnx

    from backends import profiles
    from backends.profiles.cycles import layers_from_cycles
    from backends.profiles.suggest import suggest

    per_op = cycles.get("per_op") or {}
    if not per_op:
        return None
    model = onnx.load(str(request.inputs["model"]), load_external_data=False)
    rows = cycle_rows(per_op, model)
    clock_hz, clock = _clock(request.target)
    layers = layers_from_cycles(rows, clock_hz, model)
    ran_in = precisions(model)
    for layer, row in zip(layers, rows, strict=True):
        layer.update(
            cycles=row["cycles"], inserted=row["inserted"], executed_by=f"{simulator}: {row['qnn_op']}"
        )
        layer["precision"] = next((ran_in[n] for n in layer["onnx_nodes"] if n in ran_in), None)
    placement_path = request.inputs.get("placement")
    placement = json.loads(Path(placement_path).read_text()) if placement_path is not None else {}
    profiles.with_costs(layers, model, placement)
    profile = profiles.build(
        runtime=simulator,
        evidence=EVIDENCE,
        how=f"the last evaluation sample on the {simulator} with profiling_level detailed: simulated "
        f"cycles per HTP op, milliseconds at {clock}; nodes that fall "
        "back to the CPU run outside the HTP graph and are not in this profile",
        layers=layers,
        runs=[],
        timed_p50_ms=None,
        target=request.target,
        device_evidence="estimated: the HTP graph the simulator ran (every op in it is the NPU's)",
    )
    profile["evidence_of"]["time_ms"] = (
        f"{EVIDENCE} at {clock}: shares and ranks hold at any clock, absolute milliseconds do not"
    )
    profile["htp_clock_hz"] = clock_hz
    profile["evidence_of"]["cycles"] = EVIDENCE
    profile["evidence_of"]["precision"] = PRECISION_EVIDENCE
    profile["total_cycles"] = cycles.get("last_total")
    profile["suggestions"] = suggest(profile, request.target, model=model)
    return profile
