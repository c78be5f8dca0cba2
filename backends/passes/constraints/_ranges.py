"""Numeric range clauses: kernel, stride, pad and dilation ranges, and N/C/H/W size limits."""

from __future__ import annotations

import re
from typing import Any

from backends.passes.constraints._registry import Result, _check, rule
from backends.passes.constraints._view import OK, NodeView


def _range(text: str) -> tuple[float, float]:
    m = re.match(r"(-?[\d.]+)\s*-\s*(-?[\d.]+)", text)
    if m:
        return float(m.group(1)), float(m.group(2))
    m = re.match(r"<=\s*([\d.]+)", text)
    if m:
        return float("-inf"), float(m.group(1))
    raise ValueError(text)


def _pair(values: Any, lo: float, hi: float) -> bool:
    return all(lo <= float(x) <= hi for x in values)


@rule(r"^kernel\s*(\d+\s*-\s*\d+|<=\s*\d+)(?: \(depthwise (\d+)-(\d+)\))?$")
def _kernel(m: re.Match[str], v: NodeView) -> Result:
    k = v.kernel()
    if k is None:
        return None
    lo, hi = _range(m.group(1))
    if m.group(2) and v.depthwise():
        lo, hi = float(m.group(2)), float(m.group(3))
    return _check(_pair(k, lo, hi), f"kernel {k}", f"kernel {k} outside {m.group(1)}")


@rule(r"^stride\s*(\d+\s*-\s*\d+|<=\s*\d+)$")
def _stride(m: re.Match[str], v: NodeView) -> Result:
    s = list(v.attr("strides") or [])
    lo, hi = _range(m.group(1))
    return _check(_pair(s, lo, hi), f"strides {s}", f"strides {s} outside {m.group(1)}")


@rule(r"^stride only ((?:\d/)+\d)$")
def _stride_set(m: re.Match[str], v: NodeView) -> Result:
    allowed = {int(x) for x in m.group(1).split("/")}
    s = [int(x) for x in v.attr("strides") or []]
    return _check(all(x in allowed for x in s), f"strides {s}", f"strides {s}")


@rule(r"^pads (\d+\s*-\s*\d+)$")
def _pads(m: re.Match[str], v: NodeView) -> Result:
    p = list(v.attr("pads") or [])
    lo, hi = _range(m.group(1))
    return _check(_pair(p, lo, hi), f"pads {p}", f"pads {p} outside {m.group(1)}")


@rule(r"^dilation (\d+\s*-\s*\d+)(?: \(dw (\d+)-(\d+)\))?$")
def _dilation(m: re.Match[str], v: NodeView) -> Result:
    d = list(v.attr("dilations") or [])
    lo, hi = _range(m.group(1))
    if m.group(2) and v.depthwise():
        lo, hi = float(m.group(2)), float(m.group(3))
    return _check(_pair(d, lo, hi), f"dilations {d}", f"dilations {d}")


@rule(r"^width\s*<\s*(\d+) when dilated$")
def _dilated_width(m: re.Match[str], v: NodeView) -> Result:
    d = list(v.attr("dilations") or [])
    s = v.shape()
    if all(int(x) == 1 for x in d):
        return OK, "not dilated"
    if s is None:
        return None
    return _check(s[-1] < int(m.group(1)), f"width {s[-1]}", f"width {s[-1]} when dilated")


@rule(
    r"^(?:pdf lists )?((?:[nchw],)*[nchw])\s*(?:<=\s*(\d+)|in \((\d+),\s*(\d+)\]|in \[(\d+),\s*(\d+)\])(?: \(.*\))?$"
)
def _dim_limits(m: re.Match[str], v: NodeView) -> Result:
    s = v.shape()
    if s is None:
        return None
    if m.group(2):
        lo, hi = float("-inf"), int(m.group(2))
    elif m.group(3):
        lo, hi = int(m.group(3)) + 1, int(m.group(4))
    else:
        lo, hi = int(m.group(5)), int(m.group(6))
    letters = m.group(1).split(",")
    if len(s) != 4:
        return None if len(s) > 4 else (OK, f"rank {len(s)}") if all(lo <= d <= hi for d in s) else None
    dims = {k: s[i] for i, k in enumerate("nchw")}
    bad = [f"{k}={dims[k]}" for k in letters if not lo <= dims[k] <= hi]
    return _check(not bad, f"{m.group(1).upper()} within limits", ", ".join(bad) + " out of range")


@rule(r"^a \[b,k,1,n\] with k\s*<=\s*(\d+)$")
def _exmatmul(m: re.Match[str], v: NodeView) -> Result:
    return None  # the layout mapping to exMatMul's [b,k,1,n] is not stated in the source
