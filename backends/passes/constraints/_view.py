"""What every rule shares: the node as rules see it (attributes with their ONNX defaults, tensor
facts), the NPU context that decides dtype clauses, and the verdict a clause gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx

    from backends.passes.facts import Facts

OK, FAILED, NOT_EVALUATED, INFO = "ok", "failed", "not_evaluated", "info"


@dataclass(frozen=True)
class Verdict:
    status: str
    """ok | failed | not_evaluated | info"""
    clause: str
    detail: str = ""

    def text(self) -> str:
        if self.status == NOT_EVALUATED:
            return f"not evaluated: {self.clause}"
        return f"{self.clause} ({self.detail})" if self.detail else self.clause


@dataclass(frozen=True)
class Context:
    """How the model will run on the NPU: the precision decides dtype clauses."""

    npu_dtype: str = "fp32"
    """fp32 | fp16 | int8 | int16: the compute type on the NPU."""
    activations: str = "float32"
    """Activation element type: float32, float16, uint8, int8, uint16, int16."""
    weights: str = "float32"
    quantized: bool = False
    opset: int = 13


_ATTR_DEFAULTS: dict[str, Any] = {
    "auto_pad": "NOTSET",
    "alpha": 1.0,
    "beta": 1.0,
    "transA": 0,
    "transB": 0,
    "select_last_index": 0,
    "count_include_pad": 0,
    "ceil_mode": 0,
    "storage_order": 0,
    "antialias": 0,
    "exclude_outside": 0,
    "keep_aspect_ratio_policy": "stretch",
    "coordinate_transformation_mode": "half_pixel",
    "nearest_mode": "round_prefer_floor",
    "noop_with_empty_axes": 0,
    "p": 2,
    "group": 1,
}


class NodeView:
    """One node plus what the evaluators need to know about its tensors."""

    def __init__(self, node: onnx.NodeProto, facts: Facts, ctx: Context) -> None:
        from onnx import helper

        self.node, self.facts, self.ctx = node, facts, ctx
        self.op = node.op_type
        self.attrs: dict[str, Any] = {}
        for a in node.attribute:
            value = helper.get_attribute_value(a)
            self.attrs[a.name] = value.decode() if isinstance(value, bytes) else value

    def attr(self, name: str) -> Any:
        if name in self.attrs:
            return self.attrs[name]
        if name == "mode":
            return {"Resize": "nearest", "Pad": "constant", "Upsample": "nearest"}.get(self.op)
        if name in ("dilations", "strides"):
            return [1] * max(self.spatial_rank(), 1)
        if name == "pads":
            return [0] * 2 * max(self.spatial_rank(), 1)
        if name == "kernel_shape":
            return self.kernel()
        if name == "epsilon":
            return 1e-5
        if name == "axis":
            return {"Softmax": -1, "LogSoftmax": -1, "LayerNormalization": -1, "Concat": None}.get(self.op, 0)
        return _ATTR_DEFAULTS.get(name)

    @property
    def x(self) -> str:
        return self.node.input[0] if self.node.input else ""

    def rank(self, tensor: str | None = None) -> int | None:
        return self.facts.rank(self.x if tensor is None else tensor)

    def shape(self, tensor: str | None = None) -> tuple[int, ...] | None:
        return self.facts.static_shape(self.x if tensor is None else tensor)

    def out_shape(self) -> tuple[int, ...] | None:
        return self.facts.static_shape(self.node.output[0]) if self.node.output else None

    def spatial_rank(self) -> int:
        r = self.rank()
        return 0 if r is None else max(r - 2, 0)

    def kernel(self) -> list[int] | None:
        if "kernel_shape" in self.attrs:
            return list(self.attrs["kernel_shape"])
        if self.op in ("Conv", "ConvTranspose") and len(self.node.input) > 1:
            w = self.facts.static_shape(self.node.input[1])
            return list(w[2:]) if w else None
        if self.op in ("GlobalAveragePool", "GlobalMaxPool"):
            s = self.shape()
            return list(s[2:]) if s else None
        return None

    def depthwise(self) -> bool:
        if self.op != "Conv":
            return False
        s = self.shape()
        group = int(self.attr("group") or 1)
        return group > 1 and s is not None and group == s[1]

    def input(self, index: int) -> str:
        return self.node.input[index] if len(self.node.input) > index else ""

    def const_value(self, index: int) -> Any:
        name = self.input(index)
        return None if not name else self.facts.value(name)

    def norm_axis(self, axis: int | None) -> int | None:
        r = self.rank()
        if axis is None or r is None:
            return None
        return axis + r if axis < 0 else axis

    def data_inputs(self) -> list[str]:
        return [t for t in self.node.input if t and not self.facts.is_const(t)]
