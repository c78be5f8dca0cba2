"""Notes and general remarks. Most restrict nothing and are answered as info so the report does not
list them as unchecked; the few that do (opset, inference mode, the ML Program op list) are checked.
"""

from __future__ import annotations

import re

from backends.passes.constraints._registry import Result, _check, rule
from backends.passes.constraints._view import FAILED, INFO, OK, NodeView

_INFO_PATTERNS = (
    r"multi-core ok|^no multi-core$|^per-layer quant$|^per-channel weight quant$|^fusable with",
    r"supported since \d|^not on gpu|htp ok\)?$|^registered$|^unary\b|^binary\b|generic constraints only",
    r"^supported$|doc restriction: none|: implemented, omz passrate|^listed \(|opset \d+\+ kernel$",
    r"no kernel; runs as its onnx function|\(mapped to elementwiseadd\)|lowered to fullyconnected",
    r"removed by converters|removed at conversion|^table incomplete|often fused as activation",
    r"^per-channel quant only conv|^asym u8/s8, sym s8/s16, fp16",
    r"^\(?lowered to fullyconnected\)?$|pre-computed host-side|^output is int64",
    r"^indices cast to int32$|^bool data cast to uint8$|lowered to notequal$",
    r"^both branches are always executed",
)


@rule("|".join(f"(?:{p})" for p in _INFO_PATTERNS))
def _info(m: re.Match[str], v: NodeView) -> Result:
    return INFO, "note; restricts nothing"


@rule(r"^(?:mlprogram: )?not listed$")
def _not_listed(m: re.Match[str], v: NodeView) -> Result:
    return FAILED, "not in the ML Program op list"


@rule(
    r"^(?:per-channel weight quant axis \d|non-constant inputs per-tensor quant only|activation inputs per-tensor "
    r"quant only|int16 (?:fc )?weights per-tensor only|output no per-channel quant)$"
)
def _quant_scheme(m: re.Match[str], v: NodeView) -> Result:
    if not v.ctx.quantized:
        return OK, "not quantized"
    if m.string.startswith("int16") and "16" not in v.ctx.weights:
        return OK, f"{v.ctx.weights} weights"
    return None  # granularity is chosen by the quantize stage, after this check


@rule(r"^two rank-1 inputs not supported natively \(reshaped\)$")
def _rank1_matmul(m: re.Match[str], v: NodeView) -> Result:
    return OK, "handled by reshaping"


@rule(r"^inference mode only$")
def _inference_mode(m: re.Match[str], v: NodeView) -> Result:
    training = int(v.attrs.get("training_mode", 0))
    return _check(training == 0 and len(v.node.output) == 1, "inference mode", "training mode")


@rule(r"^opset\s*>=\s*(\d+)$")
def _opset(m: re.Match[str], v: NodeView) -> Result:
    need = int(m.group(1))
    return _check(v.ctx.opset >= need, f"opset {v.ctx.opset}", f"model opset {v.ctx.opset} < {need}")


@rule(r"compile-time folded|compile-time constant|only constant input \(folded\)")
def _folded(m: re.Match[str], v: NodeView) -> Result:
    if all(v.facts.static_shape(t) is not None for t in v.node.input if t):
        return OK, "static shapes: folded at compile time"
    return None
