"""Evaluates an op table row's verbatim constraint text against one node.

Vendor tables state restrictions in prose ("NPU: int8/fp16; 4-D; axis in {0,1,2,3}"). The text is split
into clauses; each clause is matched against a library of parsers for the phrasings the shipped tables
use (dtype lists, ranks, axes, attribute values, kernel/stride/pad ranges, constant inputs, arities).
A clause no parser understands is reported as "not evaluated: <clause>", never guessed: the node keeps
its table placement and the report says which clauses were not checked.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx

    from backends.catalog import OpSupport
    from backends.onnx.facts import Facts

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


# ---------------------------------------------------------------- clause splitting


_PREFIX = re.compile(
    r"^(?:doc|code\(derived\)|npu|md|mlprogram|\[[^\]]*\])\s*:?\s*",
    re.IGNORECASE,
)


@cache
def split_clauses(text: str) -> tuple[str, ...]:
    """Top-level clauses: split at ';' and '|' outside brackets, then at sentence ends."""
    text = _mlprogram_part(text)
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(depth - 1, 0)
        if ch in ";|" and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    out: list[str] = []
    for part in parts:
        for sentence in re.split(r"(?<=[a-z0-9)\]`'])\.\s+(?=[A-Z`])", part.strip()):
            clause = _strip_prefixes(sentence.strip().rstrip("."))
            if clause:
                out.append(clause)
    return tuple(out)


def _mlprogram_part(text: str) -> str:
    """Core ML rows describe two model formats; the ML Program format (the EP default) is evaluated."""
    m = re.match(r"\s*MLProgram:\s*(.*?);\s*NeuralNetwork:", text, re.DOTALL)
    return f"MLProgram: {m.group(1)}" if m else text


def _strip_prefixes(clause: str) -> str:
    while True:
        stripped = _PREFIX.sub("", clause, count=1).strip()
        if stripped == clause:
            return clause
        clause = stripped


# ---------------------------------------------------------------- evaluation entry point


def evaluate(support: OpSupport, node: onnx.NodeProto, facts: Facts, ctx: Context) -> list[Verdict]:
    """Verdicts for every clause of the row's constraint text (empty text: no clause, no verdict)."""
    view = NodeView(node, facts, ctx)
    verdicts: list[Verdict] = []
    for clause in split_clauses(support.constraints or ""):
        verdicts.append(evaluate_clause(clause, view))
    return verdicts


def evaluate_clause(clause: str, view: NodeView) -> Verdict:
    low = " ".join(clause.lower().split())
    for pattern, fn in _rules():
        m = pattern.search(low)
        if m is None:
            continue
        try:
            result = fn(m, view)
        except (TypeError, ValueError, IndexError, KeyError, ZeroDivisionError):
            result = None
        if result is not None:
            status, detail = result
            return Verdict(status, clause, detail)
    return Verdict(NOT_EVALUATED, clause)


Result = tuple[str, str] | None
Rule = Callable[[re.Match[str], NodeView], Result]
_RULES: list[tuple[str, Rule]] = []


def rule(pattern: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        _RULES.append((pattern, fn))
        return fn

    return register


@cache
def _rules() -> tuple[tuple[re.Pattern[str], Rule], ...]:
    return tuple((re.compile(p), fn) for p, fn in _RULES)


def _check(ok: bool, good: str, bad: str) -> tuple[str, str]:
    return (OK, good) if ok else (FAILED, bad)


# ---------------------------------------------------------------- notes that restrict nothing


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


# ---------------------------------------------------------------- dtypes

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
    pairs = set(re.findall(r"\((\w+), (\w+)\)", m.group(1)))
    a = v.ctx.activations
    b = v.ctx.weights if v.facts.is_const(v.input(1)) else v.ctx.activations
    return _check((a, b) in pairs, f"({a}, {b})", f"inputs ({a}, {b}) not in the supported pairs")


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


# ---------------------------------------------------------------- ranks


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


# ---------------------------------------------------------------- axes


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


# ---------------------------------------------------------------- attribute values


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


# ---------------------------------------------------------------- numeric ranges (kernels, strides, sizes)


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


# ---------------------------------------------------------------- conditional clauses that do not apply


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


def summarize(verdicts: Sequence[Verdict]) -> tuple[list[str], list[str]]:
    """(failed texts, not-evaluated texts) of a verdict list."""
    failed = [v.text() for v in verdicts if v.status == FAILED]
    unknown = [v.clause for v in verdicts if v.status == NOT_EVALUATED]
    return failed, unknown
