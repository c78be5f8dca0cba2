"""Dtype clauses. Vendor dtype names map to a family (int8, int16, fp16, fp32) that is compared with the
compute type the model runs at on the NPU (Context.npu_dtype), not with the float graph's types.
"""

from __future__ import annotations

import re

from backends.passes.constraints._registry import Result, _check, rule
from backends.passes.constraints._view import FAILED, OK, NodeView

_DT = r"(?:u?int8|u?int16|fp16|fp32|bf16|float16|float32|float|u8|s8|s16)"
_FAMILY = {
    "int8": "int8",
    "uint8": "int8",
    "u8": "int8",
    "s8": "int8",
    "int16": "int16",
    "uint16": "int16",
    "s16": "int16",
    "fp16": "fp16",
    "float16": "fp16",
    "bf16": "fp16",
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
}


def _dtype_result(allowed: set[str], v: NodeView) -> Result:
    have = v.ctx.npu_dtype
    return _check(have in allowed, f"runs {have}", f"runs {have}; allowed: {'/'.join(sorted(allowed))}")


@rule(
    rf"^(?:conv2d |data |via ex\w+(?: \([^)]*\))?: )?({_DT}(?:\s*/\s*{_DT})*)(?: only)?"
    r"(?: \((?:no int8|ex\w+)\))?$"
)
def _dtype_list(m: re.Match[str], v: NodeView) -> Result:
    allowed = {_FAMILY[t.strip()] for t in m.group(1).split("/")}
    if m.group(0).startswith("conv2d ") and v.rank() not in (None, 4):
        return FAILED, f"Conv2D needs a 4-D input; rank {v.rank()}"
    return _dtype_result(allowed, v)


@rule(r"^fp32 inputs only$|only supports cases when both inputs are fp32")
def _fp32_only(m: re.Match[str], v: NodeView) -> Result:
    return _dtype_result({"fp32"}, v)


@rule(r"32-bit feature-maps are not supported")
def _no_fp32(m: re.Match[str], v: NodeView) -> Result:
    return _check(v.ctx.npu_dtype != "fp32", f"runs {v.ctx.npu_dtype}", "32-bit feature maps (fp32 model)")


@rule(r"quantized input not supported|not for quantized inputs")
def _no_quant(m: re.Match[str], v: NodeView) -> Result:
    return _check(not v.ctx.quantized, "float inputs", "the model is quantized")


@rule(r"supported input data types on htp backend: ((?:\(\w+, \w+\),? ?)+)")
def _dtype_pairs(m: re.Match[str], v: NodeView) -> Result:
    """The pairs hold for two activations. A constant second input is the layer's weights, which
    the HTP takes at the weight type with any listed activation type (QNN's own validation accepts
    a MatMul of uint8 activations by int8 constant weights: tests/backends/passes/test_constraints.py)."""
    pairs = set(re.findall(r"\((\w+), (\w+)\)", m.group(1)))
    a = v.ctx.activations
    if v.facts.is_const(v.input(1)):
        ok = a in {first for first, _ in pairs}
        return _check(ok, f"({a}, {v.ctx.weights} weights)", f"activations {a} not in the supported pairs")
    return _check((a, a) in pairs, f"({a}, {a})", f"inputs ({a}, {a}) not in the supported pairs")


@rule(r"^(?:condition bool)$")
def _cond_bool(m: re.Match[str], v: NodeView) -> Result:
    return _check(v.facts.dtypes.get(v.x) == 9, "bool condition", "condition is not bool")


@rule(r"^t\d?: ([a-z0-9, ]+)$")
def _type_list(m: re.Match[str], v: NodeView) -> Result:
    names = {t.strip() for t in m.group(1).split(",")}
    onnx_names = {
        1: "float",
        10: "float16",
        11: "double",
        6: "int32",
        7: "int64",
        9: "bool",
        2: "uint8",
        3: "int8",
    }
    have = onnx_names.get(v.facts.dtypes.get(v.x, 0))
    if have is not None and have in names:
        return OK, f"{have} kernel"
    return None  # which type variable binds which input is not in the text: not evaluated
