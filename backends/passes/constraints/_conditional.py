"""Clauses that hold only under a condition (another QNN backend, fp16, reflect mode): they pass when
the condition does not apply to this node.
"""

from __future__ import annotations

import re

from backends.passes.constraints._registry import Result, _check, rule
from backends.passes.constraints._view import OK, NodeView


@rule(r"^(?:on )?qnn cpu backend|^rank-5 \(3d pooling\) requires|^not on qnn cpu backend")
def _other_backend(m: re.Match[str], v: NodeView) -> Result:
    if m.string.startswith("rank-5"):
        return _check(v.rank() != 5, "not rank 5", "rank-5 pooling needs the GPU backend or bf16 mode")
    return OK, "applies to another QNN backend"


@rule(r"^(?:fp16 constant_value must be 0)$")
def _fp16_pad(m: re.Match[str], v: NodeView) -> Result:
    if v.ctx.npu_dtype != "fp16":
        return OK, "not fp16"
    value = v.const_value(2)
    return _check(value is None or float(value.reshape(-1)[0]) == 0.0, "constant 0", "non-zero constant")


@rule(r"^reflect: no negative pads and pad\s*<=\s*dim-1\)?$|^\(?reflect: ")
def _reflect(m: re.Match[str], v: NodeView) -> Result:
    if v.attr("mode") != "reflect":
        return OK, "not reflect mode"
    return None
