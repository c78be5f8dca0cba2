"""npu_coverage after compile from the operations the .mlpackage's ML Program holds.

The package is what runs: coremltools folds BatchNormalization into the convolutions and a Flatten into
a reshape, so the op table's count over the ONNX graph counts nodes that no longer exist. Each
operation of the program (read back with coremltools, constants left out) is looked up in the
target's op table through the ONNX operator it implements (MIL_TO_ONNX): listed yes or partial, on the
Neural Engine (a partial row's restrictions are not evaluated, and are counted as such); listed no, or
an operation the mapping does not name, off it, named. Core ML itself chooses per operation when the
app loads the model (MLComputePlan, macOS only), so the figure is `estimated: <TOOL>`, never measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backends.catalog import Target
from backends.sdk.vocab import estimated_by

TOOL = "Core ML EP table on the ML Program"
EVIDENCE = estimated_by(TOOL)

MIL_TO_ONNX: dict[str, str] = {
    "add": "Add",
    "sub": "Sub",
    "mul": "Mul",
    "real_div": "Div",
    "pow": "Pow",
    "sqrt": "Sqrt",
    "exp": "Exp",
    "erf": "Erf",
    "clip": "Clip",
    "relu": "Relu",
    "relu6": "Clip",
    "leaky_relu": "LeakyRelu",
    "prelu": "PRelu",
    "elu": "Elu",
    "sigmoid": "Sigmoid",
    "sigmoid_hard": "HardSigmoid",
    "softplus": "Softplus",
    "tanh": "Tanh",
    "gelu": "Gelu",
    "softmax": "Softmax",
    "conv": "Conv",
    "conv_transpose": "ConvTranspose",
    "linear": "Gemm",
    "matmul": "MatMul",
    "avg_pool": "AveragePool",
    "max_pool": "MaxPool",
    "reduce_mean": "ReduceMean",
    "reduce_sum": "ReduceSum",
    "reduce_max": "ReduceMax",
    "batch_norm": "BatchNormalization",
    "instance_norm": "InstanceNormalization",
    "layer_norm": "LayerNormalization",
    "reshape": "Reshape",
    "transpose": "Transpose",
    "concat": "Concat",
    "split": "Split",
    "squeeze": "Squeeze",
    "expand_dims": "Unsqueeze",
    "slice_by_index": "Slice",
    "slice_by_size": "Slice",
    "gather": "Gather",
    "gather_nd": "GatherND",
    "tile": "Tile",
    "pad": "Pad",
    "cast": "Cast",
    "upsample_bilinear": "Resize",
    "upsample_nearest_neighbor": "Resize",
    "resize_bilinear": "Resize",
    "depth_to_space": "DepthToSpace",
    "reduce_argmax": "ArgMax",
    "identity": "Identity",
    "maximum": "Max",
    "round": "Round",
    "ceil": "Ceil",
    "inverse": "Reciprocal",
    "sin": "Sin",
    "cos": "Cos",
    "lstm": "LSTM",
    "gru": "GRU",
}
"""MIL operation -> the ONNX operator whose op-table row judges it (the same computation)."""


def coverage(ops: Mapping[str, int], target: Target) -> dict[str, Any]:
    """The npu_coverage measurement over the program's operations (`ops`: type -> count)."""
    from backends.catalog import op_table

    table = op_table(target.op_table)
    on: dict[str, int] = {}
    off: dict[str, str] = {}
    partial = 0
    for op, n in sorted(ops.items()):
        row = table.lookup(MIL_TO_ONNX[op]) if op in MIL_TO_ONNX else None
        if row is not None and row.supported in ("yes", "partial"):
            on[op] = n
            partial += n if row.supported == "partial" else 0
        else:
            off[op] = _why_off(op, row)
    total = sum(ops.values())
    listed = ", ".join(f"{op} x{n}" for op, n in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])))
    detail = (
        f"{sum(on.values())}/{total} of the .mlpackage's ML Program operations ({listed}) are listed by "
        f"{table.id}@{table.version} through the ONNX operator each implements"
    )
    if partial:
        detail += f"; {partial} under restrictions not evaluated"
    if off:
        detail += "; off the Neural Engine: " + ", ".join(
            f"{op} x{ops[op]} ({why})" for op, why in sorted(off.items())
        )
    detail += "; Core ML chooses per operation when the app loads the model (MLComputePlan, macOS only)"
    return {
        "value": round(sum(on.values()) / total, 6) if total else 0.0,
        "evidence": EVIDENCE,
        "detail": detail,
    }


def _why_off(op: str, row: Any) -> str:
    if op not in MIL_TO_ONNX:
        return "no ONNX counterpart named"
    return "not in the op table" if row is None else f"op table: {row.supported}"


def absent(onnx_ops: Mapping[str, int], ops: Mapping[str, int]) -> dict[str, int]:
    """ONNX operators of the source graph of a kind no operation of the program implements (the
    converter folded them away or rewrote them, as BatchNormalization into the convolutions and Flatten
    into a reshape): the op table's count over the ONNX graph counted them, the package holds none."""
    present = {MIL_TO_ONNX.get(op) for op in ops}
    return {
        t: n for t, n in sorted(onnx_ops.items()) if t not in present and t not in ("Constant", "Identity")
    }
