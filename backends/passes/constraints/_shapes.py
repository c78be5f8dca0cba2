"""Rank and axis clauses. Ranks are phrased many ways ("rank 3/4/5", "up to 4D", "2D pooling only");
for spatial ops an "ND" count is of spatial dims, so 2D pooling means a rank-4 input.
"""

from __future__ import annotations

import re

from backends.passes.constraints._registry import Result, _check, rule
from backends.passes.constraints._view import FAILED, OK, NodeView

_SPATIAL_OPS = frozenset(
    {
        "Conv",
        "ConvTranspose",
        "AveragePool",
        "MaxPool",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "LpPool",
        "Resize",
    }
)
_ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where", "PRelu"})


def _rank_set(text: str, op: str) -> set[int] | None:
    t = text
    spatial = op in _SPATIAL_OPS
    m = re.search(r"ranks? (\d)\s*-\s*(\d)d?\b", t)
    if m:
        return set(range(int(m.group(1)), int(m.group(2)) + 1))
    m = re.search(r"rank (\d) \(1d\) / (\d) \(2d\) / (\d) \(3d\)", t)
    if m:
        return {int(m.group(i)) for i in (1, 2, 3)}
    m = re.search(r"rank(?:-| )((?:\d/)*\d)\b", t)
    if m and "<" not in t:
        return {int(x) for x in m.group(1).split("/")}
    m = re.search(r"rank\s*<=\s*(\d)", t)
    if m:
        return set(range(int(m.group(1)) + 1))
    m = re.search(r"(?:up to|<=)\s*(\d)d\b", t)
    if m:
        return set(range(int(m.group(1)) + 1))
    m = re.search(r"\b(\d)-(\d)d\b", t)
    if m:
        return set(range(int(m.group(1)), int(m.group(2)) + 1))
    m = re.search(r"\b(\d)d or (\d)d\b", t)
    if m:
        return {int(m.group(1)), int(m.group(2))}
    m = re.search(r"\b(\d)d/(\d)d\b", t)
    if m:
        dims = {int(m.group(1)), int(m.group(2))}
        return {d + 2 for d in dims} if spatial else dims
    m = re.search(r"\b(\d)-?d\b", t)
    if m:
        d = int(m.group(1))
        return {d + 2} if spatial and d <= 3 else {d}
    return None


@rule(
    r"^(?:input )?ranks? [\d/ ()a-z-]*only|^rank \d/\d on npu|^rank\s*<=\s*\d$|^ranks \d-\dd$|^\d-\dd(?: inputs)?$"
    r"|^(?:inputs )?up to \dd$|^<=\dd$|^\dd or \dd input$|^rank-\d(?: \(2d pool\))? only$|^\dd only$|^\d-d"
    r"(?: \[n,c,h,w\])?$|^\dd (?:input|pooling only|only)|^only \dd(?:/\dd)? (?:pool|conv|resize) is supported"
    r"|^\dd conv only|^same rank limits as conv$|^htp linear: rank \d-\d$|^see \w+ \(rank [\d/]+\)$"
)
def _rank(m: re.Match[str], v: NodeView) -> Result:
    text = m.string
    if text.startswith("htp linear") and v.attr("mode") != "linear":
        return OK, "not linear mode"
    if text.startswith("same rank limits as conv"):
        allowed: set[int] | None = {3, 4, 5}
    else:
        allowed = _rank_set(text, v.op)
    if allowed is None:
        return None
    ranks = [v.rank(t) for t in v.data_inputs()] or [v.rank()]
    if v.op in _ELEMENTWISE and v.node.output:
        ranks.append(v.facts.rank(v.node.output[0]))
    if not ranks or any(r is None for r in ranks):
        return None
    bad = [r for r in ranks if r not in allowed]
    if bad:
        return FAILED, f"rank {bad[0]}; allowed {sorted(allowed)}"
    return OK, f"rank {max(r for r in ranks if r is not None)}"


@rule(r"^axis ((?:\d(?:,? or |, ?))*\d) \([^)]*\) only$|^axis ((?:\d or )+\d) only$")
def _axis_or(m: re.Match[str], v: NodeView) -> Result:
    allowed = {int(x) for x in re.findall(r"\d", m.group(1) or m.group(2))}
    axis = v.norm_axis(v.attr("axis"))
    if axis is None:
        return None
    return _check(axis in allowed, f"axis {axis}", f"axis {axis}; allowed {sorted(allowed)}")


@rule(r"^axis in \{([\d,\s]+)\}$")
def _axis_in(m: re.Match[str], v: NodeView) -> Result:
    allowed = {int(x) for x in m.group(1).split(",")}
    axis = v.norm_axis(v.attr("axis"))
    if axis is None:
        return None
    return _check(axis in allowed, f"axis {axis}", f"axis {axis}; allowed {sorted(allowed)}")


@rule(r"^axis in \[0 rank-1\]$")
def _axis_valid(m: re.Match[str], v: NodeView) -> Result:
    return OK, "valid axis"


@rule(r"axis must be the last dimension|axis must be last dim")
def _axis_last(m: re.Match[str], v: NodeView) -> Result:
    axis, rank = v.norm_axis(v.attr("axis")), v.rank()
    if axis is None or rank is None:
        return None
    if axis == rank - 1:
        return OK, "last axis"
    if "older api" in m.string:
        return None
    return FAILED, f"axis {axis} of rank {rank}"


@rule(r"^axes (\[[\d,\s]+\](?: or \[[\d,\s]+\])*)$")
def _axes_lists(m: re.Match[str], v: NodeView) -> Result:
    allowed = [tuple(int(x) for x in grp.split(",")) for grp in re.findall(r"\[([\d,\s]+)\]", m.group(1))]
    rank = v.rank()
    if rank is None:
        return None
    if v.op in ("LayerNormalization", "RMSNormalization"):
        start = v.norm_axis(v.attr("axis"))
        if start is None:
            return None
        axes = tuple(range(start, rank))
    else:
        raw = v.attrs.get("axes")
        if raw is None:
            raw = v.const_value(1)
        if raw is None:
            return None
        axes = tuple(sorted(int(a) + rank if int(a) < 0 else int(a) for a in list(raw)))
    ok = axes in allowed and rank == 4
    return _check(
        ok, f"axes {list(axes)} of 4-D", f"axes {list(axes)} of rank {rank}; allowed {m.group(1)} on 4-D"
    )


@rule(r"^axes (\d)-(\d)$")
def _slice_axes(m: re.Match[str], v: NodeView) -> Result:
    lo, hi = int(m.group(1)), int(m.group(2))
    rank = v.rank()
    if rank is None:
        return None
    axes = v.const_value(3) if v.op == "Slice" else v.attrs.get("axes")
    axes_list = list(range(rank)) if axes is None else [int(a) + rank if int(a) < 0 else int(a) for a in axes]
    if v.op == "Slice" and axes is None:
        starts = v.const_value(1)
        axes_list = list(range(len(starts))) if starts is not None else axes_list
    bad = [a for a in axes_list if not lo <= a <= hi]
    return _check(not bad, f"axes {axes_list}", f"axis {bad[0] if bad else ''} outside {lo}-{hi}")


@rule(r"^axes\s*<=\s*rank$")
def _axes_le_rank(m: re.Match[str], v: NodeView) -> Result:
    return OK, "valid axes"


@rule(
    r"empty-axes noop not supported|empty axes with noop_with_empty_axes not supported|noop_with_empty_axes=1 unsupported"
)
def _noop_axes(m: re.Match[str], v: NodeView) -> Result:
    noop = int(v.attr("noop_with_empty_axes") or 0)
    axes = v.attrs.get("axes")
    if axes is None and len(v.node.input) > 1 and v.input(1):
        axes = v.const_value(1)
    empty = axes is None or len(list(axes)) == 0
    return _check(not (noop and empty), "axes given", "empty axes with noop_with_empty_axes=1")
