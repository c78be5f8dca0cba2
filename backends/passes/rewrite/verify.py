"""Numeric verification of rewrites: a candidate model against the model before it, on seeded random
inputs, at the graph outputs and at the boundary of every replaced region (TOLERANCE)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
    """Compares a candidate with the model before it on fixed seeded inputs: the graph outputs (max abs
    diff <= TOLERANCE) and the tensors at the boundary of every replaced region (<= TOLERANCE relative to
    the tensor's magnitude). Boundary tensors catch a wrong rewrite that later layers hide (a sigmoid
    saturated by random inputs, for instance)."""

    def __init__(self, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray] | None = None) -> None:
        self.feeds = dict(feeds) if feeds is not None else random_feeds(model)
        self.reference = run_model(model, self.feeds)
        self.last: list[np.ndarray] = self.reference
        """Graph outputs of the last accepted candidate."""
        self._pending: list[np.ndarray] = self.reference

    def check(
        self, before: State, candidate: onnx.ModelProto, matches: Sequence[Match] = ()
    ) -> tuple[bool, float]:
        """(within tolerance, max abs diff of the graph outputs against the model before).

        With `matches`, the tensors each match rewrites in place are compared too: the candidate is run
        with them (and the replaced regions' inputs) as extra outputs, and the replaced nodes alone are
        re-run on those inputs to give the values the model before computed (a small session instead of
        the whole model); when a region input vanished from the candidate, the whole model before runs.
        """
        import numpy as np

        outputs = {o.name for o in before.model.graph.output}
        boundary = sorted(set(_boundary(before, matches)) - outputs)
        region_inputs = sorted(_region_inputs(before, matches) - outputs) if boundary else []
        n_out = len(before.model.graph.output)
        try:
            got = run_model(candidate, self.feeds, boundary + region_inputs)
        except Exception:  # a rewrite that breaks the model fails verification
            try:
                got = run_model(candidate, self.feeds, boundary)
            except Exception:
                return False, float("inf")
            region_inputs = []
        want = list(self.last)
        if boundary:
            values = (
                dict(zip(region_inputs, got[n_out + len(boundary) :], strict=True)) if region_inputs else None
            )
            try:
                want += _region_values(before, matches, boundary, values) if values is not None else []
                if values is None:
                    want += run_model(before.model, self.feeds, boundary)[n_out:]
            except Exception:  # the old region must run; if not, the whole model does
                want = list(self.last) + run_model(before.model, self.feeds, boundary)[n_out:]
        self._pending = got[:n_out]
        diff, ok = 0.0, True
        for k, (a, b) in enumerate(zip(want, got[: n_out + len(boundary)], strict=True)):
            if a.shape != b.shape:
                return False, float("inf")
            if not a.size or not np.issubdtype(a.dtype, np.floating):
                ok = ok and bool(np.array_equal(a, b))
                continue
            d = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            if k < n_out:
                diff = max(diff, d)
                ok = ok and d <= TOLERANCE
            else:
                ok = ok and d <= TOLERANCE * max(1.0, float(np.max(np.abs(a))))
        return ok, diff

    def accept(self) -> None:
        """The last checked candidate becomes the model of record."""
        self.last = self._pending

    def total(self) -> float:
        """Max abs diff of the last accepted candidate's graph outputs against the original model's."""
        import numpy as np

        pairs = [(a, b) for a, b in zip(self.reference, self.last, strict=False) if a.size]
        return max(
            (float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) for a, b in pairs),
            default=0.0,
        )


def random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs: floats uniform in [-1, 1), integers zero, booleans false."""
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
        else:
            feeds[vi.name] = np.zeros(shape, dtype=dtype)
    return feeds


def run_model(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], extra_outputs: Sequence[str] = ()
) -> list[np.ndarray]:
    """Runs `model` with ONNX Runtime (CPU, basic graph optimizations only: they preserve semantics and
    make the many verification runs faster); graph outputs, then `extra_outputs`."""
    import numpy as np
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
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [np.asarray(x) for x in session.run(None, dict(feeds))]


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
    base: State, matches: Sequence[Match], boundary: Sequence[str], inputs: Mapping[str, np.ndarray]
) -> list[np.ndarray]:
    """The boundary tensors as the replaced nodes compute them from `inputs` (a model of those nodes)."""
    import onnx
    from onnx import helper, numpy_helper

    nodes = [base.model.graph.node[i] for m in matches for i in m.nodes]
    consts = sorted({t for n in nodes for t in n.input if t and t in base.facts.values})
    graph = helper.make_graph(
        nodes,
        "regions",
        [
            helper.make_tensor_value_info(t, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for t, v in sorted(inputs.items())
        ],
        [onnx.ValueInfoProto(name=t) for t in boundary],
        [numpy_helper.from_array(base.facts.values[t], t) for t in consts],
    )
    model = helper.make_model(graph, opset_imports=list(base.model.opset_import))
    model.ir_version = base.model.ir_version
    return run_model(model, inputs)
