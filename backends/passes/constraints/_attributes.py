"""Clauses on attribute values (modes, epsilon, auto_pad, Resize options). Unset attributes take their
ONNX defaults through NodeView.attr, so a clause about a default value is still decided.
"""

from __future__ import annotations

import re

from backends.passes.constraints._registry import Result, _check, rule
from backends.passes.constraints._view import INFO, OK, NodeView


def _num(text: str) -> float:
    return float(text)


@rule(r"^(?:on htp )?(\w+) must be (-?[\d.]+)(?: \([^)]*\))?$")
def _attr_must_be(m: re.Match[str], v: NodeView) -> Result:
    name, want = m.group(1), _num(m.group(2))
    if name in ("steps", "step"):
        steps = v.const_value(4)
        if steps is None and v.input(4):
            return None
        values = [1] if steps is None else [int(s) for s in steps]
        return _check(all(s == want for s in values), f"steps {values}", f"steps {values}")
    value = v.attr(name)
    if value is None:
        return None
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    ok = all(float(x) == want for x in values)
    return _check(ok, f"{name}={values if len(values) > 1 else values[0]}", f"{name}={values}")


@rule(r"^(?:p == (\d)|((?:\w+=-?[\d.]+ ?)+))$")
def _attr_eqs(m: re.Match[str], v: NodeView) -> Result:
    pairs = [("p", m.group(1))] if m.group(1) else re.findall(r"(\w+)=(-?[\d.]+)", m.group(2))
    bad = []
    for name, want in pairs:
        value = v.attr(name)
        if value is None:
            return None
        if float(value) != float(want):
            bad.append(f"{name}={value}")
    return _check(not bad, "attributes as required", ", ".join(bad))


@rule(r"^(?:no dilations|dilations 1)$")
def _no_dilation(m: re.Match[str], v: NodeView) -> Result:
    d = list(v.attr("dilations") or [])
    return _check(all(int(x) == 1 for x in d), "dilations 1", f"dilations {d}")


@rule(r"^step != 0$")
def _step_nonzero(m: re.Match[str], v: NodeView) -> Result:
    steps = v.const_value(4)
    return _check(steps is None or all(int(s) != 0 for s in steps), "steps non-zero", "a zero step")


@rule(r"^auto_pad ([a-z_/]+)(?: only)?$")
def _auto_pad(m: re.Match[str], v: NodeView) -> Result:
    allowed = {x.upper() for x in m.group(1).split("/")}
    value = str(v.attr("auto_pad"))
    return _check(value in allowed, f"auto_pad {value}", f"auto_pad {value}")


@rule(r"^epsilon\s*>\s*0$")
def _epsilon(m: re.Match[str], v: NodeView) -> Result:
    return _check(float(v.attr("epsilon")) > 0, "epsilon > 0", "epsilon <= 0")


def _mode_set(text: str) -> set[str]:
    return set(re.findall(r"[a-z_]+", text)) - {"and", "only", "or", "mode", "modes", "in"}


@rule(
    r"^(?:modes? (?:in \{)?([a-z_|/ ]+?)\}?(?: only)?(?: \(.*\))?|(constant|reflect|edge|nearest|linear|cubic) mode only"
    r"|modes ([a-z]+ and [a-z]+) only)$"
)
def _mode(m: re.Match[str], v: NodeView) -> Result:
    allowed = _mode_set(m.group(1) or m.group(2) or m.group(3))
    mode = str(v.attr("mode"))
    if v.op == "GridSample" and mode == "bilinear":
        mode = "linear"
    return _check(
        mode in allowed or (mode == "linear" and "bilinear" in allowed), f"mode {mode}", f"mode {mode}"
    )


@rule(r"^coord(?:inate)?(?: modes?)? ([a-z_|/]+)$")
def _coord_mode(m: re.Match[str], v: NodeView) -> Result:
    allowed = set(re.split(r"[|/]", m.group(1)))
    mode = str(v.attr("coordinate_transformation_mode"))
    return _check(mode in allowed, f"coordinate mode {mode}", f"coordinate mode {mode}")


@rule(r"^padding_mode in \{([a-z ]+)\}$")
def _padding_mode(m: re.Match[str], v: NodeView) -> Result:
    mode = str(v.attrs.get("padding_mode", "zeros"))
    return _check(mode in m.group(1).split(), f"padding_mode {mode}", f"padding_mode {mode}")


@rule(r"^no antialias$")
def _no_antialias(m: re.Match[str], v: NodeView) -> Result:
    return _check(int(v.attr("antialias") or 0) == 0, "antialias off", "antialias on")


@rule(r"^roi/antialias/axes/cubic/exclude_outside/keep_aspect_ratio not supported$")
def _resize_unsupported(m: re.Match[str], v: NodeView) -> Result:
    bad = []
    if v.input(1) and v.facts.numel(v.input(1)):
        bad.append("roi")
    if int(v.attr("antialias") or 0):
        bad.append("antialias")
    if "axes" in v.attrs:
        bad.append("axes")
    if v.attr("mode") == "cubic":
        bad.append("cubic")
    if int(v.attr("exclude_outside") or 0):
        bad.append("exclude_outside")
    if str(v.attr("keep_aspect_ratio_policy")) != "stretch":
        bad.append("keep_aspect_ratio_policy")
    return _check(not bad, "none used", "uses " + ", ".join(bad))


@rule(r"tf_half_pixel_for_nn coordinate_transformation_mode")
def _tf_half_pixel(m: re.Match[str], v: NodeView) -> Result:
    if v.attr("coordinate_transformation_mode") != "tf_half_pixel_for_nn":
        return OK, "not tf_half_pixel_for_nn"
    if "fall back" in m.string:
        ok = v.attr("mode") == "nearest" and v.attr("nearest_mode") == "floor" and v.rank() == 4
        return _check(ok, "nearest floor rank 4", "tf_half_pixel_for_nn outside nearest/floor/rank 4")
    return None


@rule(r"^other combinations fall back to cpu$")
def _fallback_note(m: re.Match[str], v: NodeView) -> Result:
    return INFO, "note; restricts nothing"


@rule(r"^htp nearest rank\s*(!=|) ?(\d):")
def _htp_nearest(m: re.Match[str], v: NodeView) -> Result:
    rank = v.rank()
    if v.attr("mode") != "nearest" or rank is None:
        return OK, "not nearest mode"
    want_ne, r = m.group(1) == "!=", int(m.group(2))
    if (rank != r) != want_ne:
        return OK, f"rank {rank}: clause does not apply"
    nearest, coord = str(v.attr("nearest_mode")), str(v.attr("coordinate_transformation_mode"))
    if not want_ne and "not with asymmetric" in m.string:
        bad = nearest in ("ceil", "round_prefer_floor") and coord == "asymmetric"
        return _check(not bad, f"{nearest}/{coord}", f"{nearest} with asymmetric")
    return None


@rule(r"^only spatial dims may change$|^n and c scale must be 1$")
def _spatial_only(m: re.Match[str], v: NodeView) -> Result:
    a, b = v.shape(), v.out_shape()
    if a is None or b is None or len(a) < 2:
        return None
    return _check(a[:2] == b[:2], "N, C unchanged", f"{a} -> {b}")


@rule(r"^cubic: no dynamic scales$")
def _cubic_scales(m: re.Match[str], v: NodeView) -> Result:
    if v.attr("mode") != "cubic":
        return OK, "not cubic"
    return _check(
        all(v.facts.is_const(t) for t in v.node.input[1:] if t), "constant scales", "dynamic scales"
    )


@rule(r"only integer h/w upscale (\d)-(\d)x")
def _int_upscale(m: re.Match[str], v: NodeView) -> Result:
    a, b = v.shape(), v.out_shape()
    if a is None or b is None or len(a) != 4:
        return None
    lo, hi = int(m.group(1)), int(m.group(2))
    if a[2] == a[3] == 1 and a[:2] == b[:2]:
        return OK, "(1,c,1,1) broadcast"
    ratios = [b[i] / a[i] for i in (2, 3)]
    ok = a[:2] == b[:2] and all(r.is_integer() and lo <= r <= hi for r in ratios)
    return _check(ok, f"upscale {ratios}", f"scale {ratios} not an integer {lo}-{hi}x upscale")
