"""Recurrent weights (LSTM, GRU, RNN) after ptq: int8 where the runtime has a kernel, else reported.

ONNX Runtime's static QDQ quantizer has no recurrent ops, so it leaves an OCR recognizer's two 8.4 MB LSTM
weight tensors fp32. ONNX Runtime's CPU EP runs LSTM
with int8 weights as com.microsoft DynamicQuantizeLSTM (weight-only: weights int8, the recurrence in
float), which its dynamic quantizer writes; GRU and RNN have no such kernel. On any other target the
weights stay float, and the report and note say so with their bytes.

The weights are per channel (one scale per gate row) when the policy is, as every other weight: with
one scale per tensor the recognizer's LSTM alone, every other op float, lost 0.12 of decoded-string
agreement on 50 lines (0.88); per channel it lost none on 300 lines.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.catalog import Target
from backends.sdk.errors import TerminalError, one_line

if TYPE_CHECKING:
    import onnx

RECURRENT = ("LSTM", "GRU", "RNN")
ORT_INT8 = {"LSTM": "DynamicQuantizeLSTM"}
"""Recurrent op -> the com.microsoft op ONNX Runtime's CPU EP runs it as with int8 weights."""


def _weight_bytes(model: onnx.ModelProto, node: onnx.NodeProto) -> int:
    """Bytes of the node's W and R initializers (inputs 1 and 2)."""
    inits = {t.name: t for t in model.graph.initializer}
    total = 0
    for name in node.input[1:3]:
        tensor = inits.get(name)
        if tensor is not None:
            n = 1
            for d in tensor.dims:
                n *= int(d)
            total += n * 4
    return total


def quantize_weights(
    built: Path,
    out: Path,
    target: Target,
    weights: str,
    log: Callable[[str], None] | None,
    per_channel: bool = True,
) -> tuple[Path, list[dict[str, Any]]]:
    """`built` with its LSTM weights int8 where the target runs ONNX Runtime's CPU EP; one row per
    recurrent node either way (what was done, its float weight bytes). `log` None: quiet (the auto
    search converts every candidate it builds)."""
    import onnx

    model = onnx.load(str(built))
    nodes = [n for n in model.graph.node if n.op_type in RECURRENT and n.domain in ("", "ai.onnx")]
    if not nodes:
        return built, []
    rows = [{"node": n.name, "op_type": n.op_type, "float_bytes": _weight_bytes(model, n)} for n in nodes]
    convertible = [n.name for n in nodes if n.op_type in ORT_INT8]
    if target.backend != "onnxruntime" or weights != "int8" or not convertible:
        why = (
            f"target {target.id} does not run ONNX Runtime's CPU EP, the only runtime here with int8 recurrent "
            "weights"
            if target.backend != "onnxruntime"
            else f"weights {weights}: ONNX Runtime's recurrent quantizer writes int8 weights only (on a "
            "host whose int8 kernels clip u8 x s8 sums the cpu target's weights are uint8)"
            if weights != "int8"
            else "no int8 kernel for this op in ONNX Runtime"
        )
        for row in rows:
            row.update(weights="fp32", reason=why)
        return built, rows
    from onnxruntime.quantization import QuantType, quantize_dynamic

    try:
        quantize_dynamic(
            str(built),
            str(out),
            op_types_to_quantize=sorted(ORT_INT8),
            nodes_to_quantize=convertible,
            weight_type=QuantType.QInt8,
            per_channel=per_channel,
        )
    except Exception as exc:  # noqa: BLE001 - ORT's quantizer raises plain exceptions
        raise TerminalError(f"recurrent weight quantization failed: {one_line(exc)}") from exc
    done = onnx.load(str(out))
    present = {n.name for n in done.graph.node if n.op_type in RECURRENT}
    int8_ops = {n.op_type for n in done.graph.node if n.domain == "com.microsoft"}
    for row in rows:
        if row["node"] in present or ORT_INT8.get(str(row["op_type"])) not in int8_ops:
            row.update(weights="fp32", reason="no int8 kernel for this op in ONNX Runtime")
        else:
            scales = "per channel" if per_channel else "per tensor"
            op = ORT_INT8[str(row["op_type"])]
            row.update(weights="int8", reason=f"com.microsoft {op} (weight-only, {scales})")
            row["int8_bytes"] = int(row["float_bytes"]) // 4
    if log is not None:
        log(f"recurrent weights: {note(rows)}")
    return out, rows


def note(rows: Sequence[Mapping[str, Any]]) -> str:
    """`LSTM_79 int8 (16.8 MB -> 4.2 MB)` / `GRU_3 kept fp32 (4.2 MB): why`, for the stage note."""
    parts = []
    for row in rows:
        mb = int(row["float_bytes"]) / 1e6
        if row.get("weights") == "int8":
            scales = " per channel" if "per channel" in str(row.get("reason")) else ""
            parts.append(
                f"{row['op_type']} {row['node']} weights int8{scales} ({mb:.1f} MB -> {mb / 4:.1f} MB)"
            )
        else:
            parts.append(
                f"{row['op_type']} {row['node']} weights kept fp32 ({mb:.1f} MB): {row.get('reason')}"
            )
    return "; ".join(parts)
