"""Whether a model arrives already quantized, read from its op types alone.

Two forms exist in real exports. Tensor-oriented: QuantizeLinear/DequantizeLinear pairs around float
ops (a QAT export, ONNX Runtime's static quantizer, a model converted from an int8 TFLite); NPU
compilers take these and keep their scales, which is what `quantization.mode: qat` builds.
Operator-oriented: integer operators that carry their own scales (QLinearConv, MatMulInteger, the
DynamicQuantizeLinear of ONNX Runtime's dynamic quantizer, ...); host runtimes run them, NPU
compilers generally do not. Quantizing either again (`ptq`) would round already rounded tensors with
new scales, and `fp16` would cast a graph whose arithmetic is integer; the spec says so before any
stage runs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})

INTEGER_OPS = frozenset(
    {
        "QLinearConv",
        "QLinearMatMul",
        "MatMulInteger",
        "ConvInteger",
        "DynamicQuantizeLinear",
        # ONNX Runtime's contrib operators written by its quantizers
        "QLinearAdd",
        "QLinearMul",
        "QLinearSigmoid",
        "QLinearLeakyRelu",
        "QLinearSoftmax",
        "QLinearConcat",
        "QLinearAveragePool",
        "QLinearGlobalAveragePool",
        "QLinearReduceMean",
        "QGemm",
        "QAttention",
        "DynamicQuantizeMatMul",
        "DynamicQuantizeLSTM",
        "MatMulIntegerToFloat",
        "MatMulNBits",
    }
)


@dataclass(frozen=True)
class Quantized:
    """How a model is already quantized: its Q/DQ nodes and its integer operators, by op type."""

    qdq: dict[str, int]
    integer: dict[str, int]

    @property
    def form(self) -> str:
        """`qdq` when Q/DQ nodes carry the scales (what `mode: qat` builds), else `integer`."""
        return "integer" if self.integer else "qdq"

    def text(self) -> str:
        """`QuantizeLinear x78, DequantizeLinear x114`: the op types it was recognised by."""
        counts = {**self.qdq, **self.integer}
        return ", ".join(f"{op} x{n}" for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def quantized(op_types: Iterable[str]) -> Quantized | None:
    """The model's quantized form from its nodes' op types, or None for a float model."""
    counts = Counter(op_types)
    qdq = {op: counts[op] for op in sorted(QDQ_OPS) if counts[op]}
    integer = {op: counts[op] for op in sorted(INTEGER_OPS) if counts[op]}
    if not qdq and not integer:
        return None
    return Quantized(qdq, integer)
