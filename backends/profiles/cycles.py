"""Per-layer cycles from a compiler's or simulator's performance model (vela's per-layer CSV; the QNN
HTP simulator's per-op cycles are the next to map here) as profile layers.

Nothing ran: every figure is the model's estimate, and the profile says which model. The compiler's
own MAC count is kept (it counted the operators it built); a layer is tied to the deployed ONNX node or
tensor it is named after when the converter kept the name, and left unmapped otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import onnx


def layers_from_cycles(
    rows: Iterable[Mapping[str, Any]], clock_hz: float, model: onnx.ModelProto | None
) -> list[dict[str, Any]]:
    """rows: {"name", "op", "target" ("NPU" or a CPU), "cycles", "macs"} per operator."""
    names: set[str] = set()
    producer: dict[str, str] = {}
    if model is not None:
        names = {n.name for n in model.graph.node}
        producer = {t: n.name for n in model.graph.node for t in n.output if t}
    out = []
    for row in rows:
        name = str(row.get("name") or "")
        node = name if name in names else producer.get(name)
        device = "NPU" if str(row.get("target", "")).upper() == "NPU" else "CPU"
        out.append(
            {
                "name": name,
                "op_type": row.get("op"),
                "onnx_nodes": [node] if node else [],
                "inserted": False,
                "device": device,
                "placement": device,
                "executed_by": f"{row.get('target')} (performance model)",
                "precision": None,
                "time_ms": round(float(row.get("cycles") or 0) / clock_hz * 1e3, 6) if clock_hz else 0.0,
                "macs": int(row.get("macs") or 0),
                "bytes": 0,
            }
        )
    return out
