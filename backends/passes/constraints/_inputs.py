"""Clauses on a node's inputs and outputs: the values of constant inputs (exponents, clip bounds,
indices), broadcasting, which inputs must be constant, and how many inputs and outputs there are.
"""

from __future__ import annotations

import re

from backends.passes.constraints._registry import Result, _check, rule
from backends.passes.constraints._view import FAILED, OK, NodeView

# ---------------------------------------------------------------- values of constant inputs


@rule(r"^exponent only ([-\d., ]+)$")
def _pow_exponents(m: re.Match[str], v: NodeView) -> Result:
    allowed = {float(x) for x in m.group(1).split(",")}
    e = v.const_value(1)
    if e is None:
        return (FAILED, "exponent is not a constant") if not v.facts.is_const(v.input(1)) else None
    values = {float(x) for x in e.reshape(-1)}
    return _check(values <= allowed, f"exponent {sorted(values)}", f"exponent {sorted(values)}")


def _clip_bounds(v: NodeView) -> tuple[float, float] | None:
    if "min" in v.attrs or "max" in v.attrs:
        return float(v.attrs.get("min", float("-inf"))), float(v.attrs.get("max", float("inf")))
    lo, hi = float("-inf"), float("inf")
    for index in (1, 2):
        name = v.input(index)
        if not name:
            continue
        value = v.const_value(index)
        if value is None:
            return None
        if index == 1:
            lo = float(value.reshape(-1)[0])
        else:
            hi = float(value.reshape(-1)[0])
    return lo, hi


@rule(r"relu6 \(\[0,\s*6\]\) clip|only \[min max\]=\[0 6\]|^clip\(0,6\)/\(0,1\)/\(-1,1\) map to")
def _relu6(m: re.Match[str], v: NodeView) -> Result:
    bounds = _clip_bounds(v)
    if bounds is None:
        return FAILED, "bounds are not constants"
    allowed = [(0.0, 6.0)]
    if "relu1" in m.string:
        allowed.append((-1.0, 1.0))
    if m.string.startswith("clip(0,6)"):
        return (OK, f"Clip{bounds} -> RELU") if bounds in [(0.0, 6.0), (0.0, 1.0), (-1.0, 1.0)] else None
    return _check(bounds in allowed, f"Clip{bounds}", f"Clip{bounds}; only {allowed}")


@rule(r"^slope scalar or per-channel \(c\) only$")
def _prelu_slope(m: re.Match[str], v: NodeView) -> Result:
    slope = v.facts.static_shape(v.input(1))
    x = v.shape()
    if slope is None or x is None:
        return None
    n = 1
    for d in slope:
        n *= d
    ok = n == 1 or (len(x) >= 2 and n == x[1] and sum(1 for d in slope if d != 1) <= 1)
    return _check(ok, f"slope {list(slope)}", f"slope {list(slope)}")


@rule(r"^indices rank (\d)$")
def _indices_rank(m: re.Match[str], v: NodeView) -> Result:
    r = v.rank(v.input(1))
    if r is None:
        return None
    return _check(r == int(m.group(1)), f"indices rank {r}", f"indices rank {r}")


@rule(r"^(?:only supports positive indices|constant indices must be non-negative.*)$")
def _positive_indices(m: re.Match[str], v: NodeView) -> Result:
    idx = v.const_value(1)
    if idx is None:
        return None
    return _check(bool((idx >= 0).all()), "non-negative indices", "negative indices")


@rule(r"^(?:no broadcast|broadcast as expand|any-dim broadcast \(limits as expand\))$")
def _broadcast(m: re.Match[str], v: NodeView) -> Result:
    shapes = [v.facts.static_shape(t) for t in v.node.input if t]
    if any(s is None for s in shapes):
        return None
    full = [s for s in shapes if s is not None and (len(s) > 0 and any(d != 1 for d in s))]
    if len({s for s in full}) <= 1 and all(s == v.out_shape() for s in full):
        return OK, "no broadcast"
    if m.string == "no broadcast":
        return FAILED, f"broadcasts {shapes}"
    return None  # broadcast limits are stated by reference ("as Expand") only


@rule(
    r"^only \[b,c,1,w\]/\[b,1,1,w\]/\[b,c,h,1\]/\[b,1,h,1\]/\[b,c,1,1\]->\[b,c,h,w\] with h,w\s*<=\s*(\d+)$"
)
def _expand_forms(m: re.Match[str], v: NodeView) -> Result:
    a, b = v.shape(), v.out_shape()
    if a is None or b is None:
        return None
    if len(a) != 4 or len(b) != 4:
        return FAILED, f"{list(a)} -> {list(b)} is not 4-D"
    forms = [(1, 0, 1, 1), (1, 0, 0, 1), (1, 1, 1, 0), (1, 0, 1, 0), (1, 1, 0, 0)]
    keep = tuple(int(a[i] == b[i]) for i in range(4))
    ok = keep[0] == 1 and any(
        all(f == 0 or k == 1 for f, k in zip(form, keep, strict=False)) for form in forms
    )
    ok = ok and b[2] <= int(m.group(1)) and b[3] <= int(m.group(1))
    return _check(ok, f"{list(a)} -> {list(b)}", f"{list(a)} -> {list(b)}")


# ---------------------------------------------------------------- constant-ness of inputs


_INPUT_INDEX: dict[str, dict[str, int]] = {
    "Slice": {"starts": 1, "ends": 2, "axes": 3, "steps": 4},
    "Pad": {"pads": 1, "constant_value": 2, "axes": 3},
    "Tile": {"repeats": 1},
    "TopK": {"k": 1},
    "Resize": {"roi": 1, "scales": 2, "sizes": 3},
    "Upsample": {"scales": 1},
    "OneHot": {"depth": 1, "values": 2},
    "Conv": {"weights": 1, "weight": 1, "bias": 2},
    "ConvTranspose": {"weights": 1, "weight": 1, "bias": 2},
    "Gemm": {"b": 1, "c": 2, "bias": 2},
    "MatMul": {"b": 1},
    "PRelu": {"slope": 1},
    "Squeeze": {"axes": 1},
    "Unsqueeze": {"axes": 1},
    "ReduceMean": {"axes": 1},
    "ReduceSum": {"axes": 1},
    "ReduceMax": {"axes": 1},
    "Split": {"split": 1, "splits": 1},
    "Expand": {"shape": 1},
    "Reshape": {"shape": 1},
}


def _names_in(text: str) -> list[str]:
    text = re.sub(r"^(?:inputs?|if provided,|parameter tensors|params?)\s*", "", text)
    words = re.findall(r"[a-z_]+", text)
    return [w for w in words if w not in ("and", "or", "input", "inputs", "if", "provided", "the")]


@rule(
    r"^(?:if provided, )?(?:inputs? )?([a-z_`,/() ]+?) "
    r"(?:must|should) (?:be|have) (?:constant|known)(?: initializers?| inputs?)?(?: \(.*\))?$"
    r"|^((?:[a-z_]+ )?(?:and [a-z_]+ )?)constant(?: initializer)?(?: unless int32)?(?: \(.*\))?$"
)
def _const_inputs(m: re.Match[str], v: NodeView) -> Result:
    text = (m.group(1) or m.group(2) or "").strip()
    if "shape must be known" in m.string:
        return _check(v.out_shape() is not None, "static shape", "shape unknown")
    names = _names_in(text)
    index = _INPUT_INDEX.get(v.op, {})
    if text.startswith("parameter tensors") or (not names and m.string.startswith("parameter")):
        idx = [i for i in range(1, len(v.node.input))]
    else:
        idx = []
        for word in names:
            if word in ("weight", "weights") and v.op not in index:
                idx.append(1)
            elif word in index:
                idx.append(index[word])
            else:
                return None
    dynamic = [v.input(i) for i in idx if v.input(i) and not v.facts.is_const(v.input(i))]
    if "unless int32" in m.string and dynamic:
        dynamic = [t for t in dynamic if v.facts.dtypes.get(t) != 6]
    return _check(not dynamic, "constant", f"{', '.join(dynamic)} is computed at run time")


@rule(r"^parameter tensors must be constant")
def _parameter_const(m: re.Match[str], v: NodeView) -> Result:
    dynamic = [t for t in v.node.input[1:] if t and not v.facts.is_const(t)]
    if "params tensor must be" in m.string:
        return None
    return _check(not dynamic, "constant parameters", f"{', '.join(dynamic)} computed at run time")


@rule(r"^input must not be an initializer$")
def _not_initializer(m: re.Match[str], v: NodeView) -> Result:
    return _check(not v.facts.is_const(v.x), "runtime input", "input is a constant")


@rule(r"^static input shape$|^shape must be known$")
def _static_shape(m: re.Match[str], v: NodeView) -> Result:
    return _check(v.shape() is not None, "static shape", "shape unknown")


@rule(r"^if input b is not constant, transb should be 1$")
def _gemm_b(m: re.Match[str], v: NodeView) -> Result:
    ok = v.facts.is_const(v.input(1)) or int(v.attr("transB") or 0) == 1
    return _check(ok, "B constant or transB=1", "B computed at run time with transB=0")


@rule(r"^c must have shape \[n m\]")
def _gemm_c(m: re.Match[str], v: NodeView) -> Result:
    return None  # whether [N M] means exact or broadcastable is not stated


# ---------------------------------------------------------------- arity


@rule(r"^(?:exactly )?(\d) inputs$|^>=\s*(\d) inputs$|^(\d)\.\.(\d) inputs$")
def _arity_in(m: re.Match[str], v: NodeView) -> Result:
    n = len([t for t in v.node.input if t])
    if m.group(1):
        ok = n == int(m.group(1))
    elif m.group(2):
        ok = n >= int(m.group(2))
    else:
        ok = int(m.group(3)) <= n <= int(m.group(4))
    return _check(ok, f"{n} inputs", f"{n} inputs")


@rule(r"^single output(?: only| \(no indices\))?$|^no indices output$|^single input/output$|^(\d) outputs$")
def _arity_out(m: re.Match[str], v: NodeView) -> Result:
    n = len([t for t in v.node.output if t])
    want = int(m.group(1)) if m.group(1) else 1
    ok = n == want
    if "input" in m.string:
        ok = ok and len([t for t in v.node.input if t]) == 1
    return _check(ok, f"{n} outputs", f"{n} outputs")
