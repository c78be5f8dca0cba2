"""Numeric verification of rewrites: a candidate model against the model before it, on the spec's own
samples (seeded feeds where it has none), at the graph outputs and at the boundary of every replaced
region (TOLERANCE). A feed on which the float model itself outputs NaN or Inf proves nothing and is
never used (finite_feeds)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from backends.passes import placement as P
    from backends.passes.facts import Facts
    from backends.passes.rewrite.rules import Match

TOLERANCE = 1e-4


@dataclass
class State:
    """A model with its facts and placement decisions, as one step of the rewrite sees it."""

    model: onnx.ModelProto
    facts: Facts
    decisions: dict[int, P.Decision]


class Verifier:
    """Compares a candidate with the model before it on fixed feeds: the graph outputs (max abs diff
    <= TOLERANCE) and the tensors at the boundary of every replaced region (<= TOLERANCE relative to the
    tensor's magnitude). Boundary tensors catch a wrong rewrite that later layers hide (a sigmoid
    saturated by random inputs, for instance). A NaN or Inf the model before did not have is a failure:
    the difference is NaN, and NaN is never within tolerance."""

    def __init__(self, model: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]]) -> None:
        if not feeds:
            raise ValueError("no feed to verify on")
        self.feeds = [dict(f) for f in feeds]
        self.reference = run_feeds(model, self.feeds)
        self.last: list[list[np.ndarray]] = self.reference
        """Graph outputs of the last accepted candidate, per feed."""
        self._pending: list[list[np.ndarray]] = self.reference

    def check(
        self, before: State, candidate: onnx.ModelProto, matches: Sequence[Match] = ()
    ) -> tuple[bool, float]:
        """(within tolerance on every feed, max abs diff of the graph outputs against the model before).

        With `matches`, the tensors each match rewrites in place are compared too: the candidate is run
        with them (and the replaced regions' inputs) as extra outputs, and the replaced nodes alone are
        re-run on those inputs to give the values the model before computed (a small session instead of
        the whole model); when a region input vanished from the candidate, the whole model before runs.
        """
        outputs = {o.name for o in before.model.graph.output}
        boundary = sorted(set(_boundary(before, matches)) - outputs)
        region_inputs = sorted(_region_inputs(before, matches) - outputs) if boundary else []
        n_out = len(before.model.graph.output)
        try:
            got = run_feeds(candidate, self.feeds, boundary + region_inputs)
        except Exception:  # a rewrite that breaks the model fails verification
            try:
                got = run_feeds(candidate, self.feeds, boundary)
            except Exception:
                return False, float("inf")
            region_inputs = []
        want = [list(last) for last in self.last]
        if boundary:
            for row, extra in zip(
                want, self._boundary_values(before, matches, boundary, region_inputs, got, n_out), strict=True
            ):
                row += extra
        self._pending = [row[:n_out] for row in got]
        diff, ok = 0.0, True
        for want_row, got_row in zip(want, got, strict=True):
            row_ok, row_diff = _compare(want_row, got_row[: n_out + len(boundary)], n_out)
            ok = ok and row_ok
            diff = worst(diff, row_diff)
        return ok, diff

    def _boundary_values(
        self,
        before: State,
        matches: Sequence[Match],
        boundary: Sequence[str],
        region_inputs: Sequence[str],
        got: Sequence[Sequence[np.ndarray]],
        n_out: int,
    ) -> list[list[np.ndarray]]:
        """The boundary tensors as the model before computes them, per feed."""
        if region_inputs:
            start = n_out + len(boundary)
            values = [dict(zip(region_inputs, row[start:], strict=True)) for row in got]
            try:
                return _region_values(before, matches, boundary, values)
            except Exception:  # the old region must run; if not, the whole model does
                pass
        return [row[n_out:] for row in run_feeds(before.model, self.feeds, boundary)]

    def accept(self) -> None:
        """The last checked candidate becomes the model of record."""
        self.last = self._pending

    def total(self) -> float:
        """Max abs diff of the last accepted candidate's graph outputs against the original model's."""
        return max(
            (
                max_diff(a, b)
                for ref, last in zip(self.reference, self.last, strict=True)
                for a, b in zip(ref, last, strict=False)
                if a.size and _is_float(a)
            ),
            default=0.0,
        )


def worst(a: float, b: float) -> float:
    """The larger difference, NaN when either is NaN (Python's `max(0.0, nan)` is 0.0)."""
    return a if a != a else b if b != b else max(a, b)


def _is_float(a: np.ndarray) -> bool:
    import numpy as np

    return bool(np.issubdtype(a.dtype, np.floating))


def max_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Max abs difference of two float arrays; positions where both hold the same value (the same
    infinity, or both NaN) differ by 0; a NaN on one side only makes the result NaN."""
    import numpy as np

    x, y = a.astype(np.float64), b.astype(np.float64)
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    with np.errstate(invalid="ignore"):
        d = np.where(same, 0.0, np.abs(x - y))
    return float(np.nan) if np.isnan(d).any() else float(np.max(d, initial=0.0))


def _compare(want: Sequence[np.ndarray], got: Sequence[np.ndarray], n_out: int) -> tuple[bool, float]:
    """(within tolerance, max abs diff of the first `n_out` arrays: the graph outputs) for one feed."""
    import numpy as np

    diff, ok = 0.0, True
    for k, (a, b) in enumerate(zip(want, got, strict=True)):
        if a.shape != b.shape:
            return False, float("inf")
        if not a.size or not _is_float(a):
            ok = ok and bool(np.array_equal(a, b))
            continue
        d = max_diff(a, b)
        if k < n_out:
            diff = worst(diff, d)
            ok = ok and d <= TOLERANCE
        else:
            finite = np.abs(a[np.isfinite(a)])
            ok = ok and d <= TOLERANCE * max(1.0, float(np.max(finite, initial=0.0)))
    return ok, diff


def run_feeds(
    model: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]], extra_outputs: Sequence[str] = ()
) -> list[list[np.ndarray]]:
    """`run_model` on each feed, with one session."""
    session = _session(model, extra_outputs)
    return [_run(session, feed) for feed in feeds]


MASK_FORMS = ("all false", "all true", "first half true")
"""The boolean inputs of the seeded feeds, one form per feed: a padding mask read in either convention
(true = keep or true = pad) has a form that masks nothing."""


def random_feeds(model: onnx.ModelProto, seed: int = 0, mask: str = MASK_FORMS[0]) -> dict[str, np.ndarray]:
    """Seeded inputs: floats uniform in [-1, 1), integers zero, booleans in the `mask` form."""
    import numpy as np
    from onnx import helper

    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.dim_value > 0 else 1 for d in tt.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[vi.name] = rng.uniform(-1.0, 1.0, size=shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[vi.name] = _mask(shape, mask)
        else:
            feeds[vi.name] = np.zeros(shape, dtype=dtype)
    return feeds


def _mask(shape: Sequence[int], form: str) -> np.ndarray:
    import numpy as np

    out = np.full(shape, form == "all true", dtype=np.bool_)
    if form == "first half true" and out.ndim:
        out[..., : max(1, out.shape[-1] // 2)] = True
    return out


def seeded_feeds(model: onnx.ModelProto) -> list[tuple[str, dict[str, np.ndarray]]]:
    """One seeded feed per mask form, named for the report ("random-0 (booleans all false)")."""
    has_bool = any(vi.type.tensor_type.elem_type == 9 for vi in model.graph.input)
    forms = MASK_FORMS if has_bool else MASK_FORMS[:1]
    return [
        (f"random-{k}" + (f" (booleans {form})" if has_bool else ""), random_feeds(model, k, form))
        for k, form in enumerate(forms)
    ]


@dataclass(frozen=True)
class Rejected:
    """A feed the float model itself answers with NaN or Inf: no difference can be judged on it."""

    name: str
    outputs: tuple[str, ...]
    """The graph outputs that held a NaN or Inf."""


def finite_feeds(
    model: onnx.ModelProto, named: Sequence[tuple[str, Mapping[str, np.ndarray]]], limit: int
) -> tuple[list[tuple[str, dict[str, np.ndarray]]], list[Rejected]]:
    """The first `limit` feeds on which every float output of `model` is finite, and those rejected
    (every feed tried before the limit was reached)."""
    import numpy as np

    session = _session(model, ())
    names = [o.name for o in model.graph.output]
    kept: list[tuple[str, dict[str, np.ndarray]]] = []
    rejected: list[Rejected] = []
    for name, feed in named:
        if len(kept) >= limit:
            break
        outs = _run(session, feed)
        bad = tuple(n for n, y in zip(names, outs, strict=True) if _is_float(y) and not np.isfinite(y).all())
        if bad:
            rejected.append(Rejected(name, bad))
        else:
            kept.append((name, dict(feed)))
    return kept, rejected


def run_model(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], extra_outputs: Sequence[str] = ()
) -> list[np.ndarray]:
    """Runs `model` with ONNX Runtime (CPU, basic graph optimizations only: they preserve semantics and
    make the many verification runs faster); graph outputs, then `extra_outputs`."""
    return _run(_session(model, extra_outputs), feeds)


def _session(model: onnx.ModelProto, extra_outputs: Sequence[str]) -> Any:
    import onnx
    import onnxruntime as ort

    if extra_outputs:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        copy.graph.output.extend(onnx.ValueInfoProto(name=n) for n in extra_outputs)
        model = copy
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.intra_op_num_threads = 2
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _run(session: Any, feed: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    import numpy as np

    return [np.asarray(x) for x in session.run(None, dict(feed))]


def _boundary(base: State, matches: Sequence[Match]) -> list[str]:
    """Tensors each match rewrites in place: outputs of removed nodes that the new nodes produce again."""
    out: set[str] = set()
    for m in matches:
        old = {o for i in m.nodes for o in base.model.graph.node[i].output if o}
        out |= old & {o for n in m.new_nodes for o in n.output}
    return sorted(out)


def _region_inputs(base: State, matches: Sequence[Match]) -> set[str]:
    """Runtime tensors the replaced nodes read from outside their regions."""
    nodes = [base.model.graph.node[i] for m in matches for i in m.nodes]
    produced = {o for n in nodes for o in n.output}
    return {t for n in nodes for t in n.input if t and t not in produced and t not in base.facts.values}


def _region_values(
    base: State,
    matches: Sequence[Match],
    boundary: Sequence[str],
    feeds: Sequence[Mapping[str, np.ndarray]],
) -> list[list[np.ndarray]]:
    """The boundary tensors as the replaced nodes compute them from each of `feeds` (the regions'
    inputs), with a model of those nodes alone."""
    import onnx
    from onnx import helper, numpy_helper

    nodes = [base.model.graph.node[i] for m in matches for i in m.nodes]
    consts = sorted({t for n in nodes for t in n.input if t and t in base.facts.values})
    graph = helper.make_graph(
        nodes,
        "regions",
        [
            helper.make_tensor_value_info(t, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for t, v in sorted(feeds[0].items())
        ],
        [onnx.ValueInfoProto(name=t) for t in boundary],
        [numpy_helper.from_array(base.facts.values[t], t) for t in consts],
    )
    model = helper.make_model(graph, opset_imports=list(base.model.opset_import))
    model.ir_version = base.model.ir_version
    return run_feeds(model, feeds)
