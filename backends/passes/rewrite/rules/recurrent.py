"""ONNX's LSTM and GRU, unrolled over their static sequence into the MatMul, Add, Sigmoid, Tanh and Mul
of each step: the form converters without a recurrent layer of their own take.

onnx2tf crashes on both (SIGSEGV while tracing ddddocr's LSTM and a name transliterator's GRU
encoder), and onnx2torch, Core ML's route, has no GRU. With the input shapes fixed (the import stage)
the sequence length is a constant, and each step is plain arithmetic every converter and NPU compiler
maps: the input projection of all steps in one MatMul, then per step the recurrent MatMul and the gate
equations of the ONNX operator's definition (peepholes included). Only the default activations, no
`clip`, no `input_forget` and no `sequence_lens` (every sequence full length) are unrolled; any other
node is left as it is, and so is a layer whose recurrent weights, counted once a step, exceed
_MAX_STEP_WEIGHT_BYTES (converters copy a constant into each op that reads it). The result is
verified against the model like every rewrite (the same equations in another order of additions: a
float rounding apart, not bit-exact).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from backends.passes.rewrite.rules import CLEANUP, Context, Match, Rewrite, int64_array

if TYPE_CHECKING:
    import numpy as np

_GATES = {"LSTM": 4, "GRU": 3}
_DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"]}
_MAX_STEPS = 512
"""Longer sequences stay recurrent: an unrolled graph grows by ~15 nodes a step and direction."""
_MAX_STEP_WEIGHT_BYTES = 64 * 1024 * 1024
"""Steps x directions x the recurrent weights' bytes: what a converter that copies a constant into
every op reading it holds. ddddocr's CRNN LSTM (hidden 512, 32 steps, both directions: 256 MB)
unrolled took TF's TFLite converter to 14.7 GB in ten minutes without finishing; a transliterator's
GRU (hidden 128, 24 steps, both directions: 9 MB) converts. Larger layers stay recurrent."""


@dataclass(frozen=True)
class _Cell:
    """One recurrent node's static facts."""

    op: str
    steps: int
    batch: int
    hidden: int
    directions: int
    layout: int
    w: np.ndarray
    """[directions, gates * hidden, input]"""
    r: np.ndarray
    """[directions, gates * hidden, hidden]"""
    b: np.ndarray
    """[directions, 2 * gates * hidden]: the input biases, then the recurrent ones."""
    linear_before_reset: bool
    p: np.ndarray | None = None
    """LSTM peepholes [directions, 3 * hidden] (i, o, f), or None."""


class UnrolledRecurrence(Rewrite):
    """An LSTM or GRU node of static shapes and constant weights -> its steps written out (module doc)."""

    family = "converter forms"
    kind = CLEANUP
    exact = False

    def __init__(self, op: str) -> None:
        self.op = op
        self.name = f"unrolled_{op.lower()}"

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime(self.op):
            cell = _cell(ctx, i)
            if cell is None:
                continue
            m = Match(self.name, ctx.facts.names[i], [i])
            _unroll(ctx, m, i, cell)
            out.append(m)
        return out


def _cell(ctx: Context, i: int) -> _Cell | None:
    """The node's facts when it can be unrolled exactly as the operator defines it, else None."""
    import numpy as np

    node = ctx.nodes[i]
    op = node.op_type
    inputs = list(node.input) + [""] * (8 - len(node.input))
    x_shape = ctx.facts.static_shape(inputs[0])
    w, r = _constant(ctx, inputs[1]), _constant(ctx, inputs[2])
    b = _constant(ctx, inputs[3]) if inputs[3] else None
    if x_shape is None or len(x_shape) != 3 or w is None or r is None or (inputs[3] and b is None):
        return None
    p = _constant(ctx, inputs[7]) if op == "LSTM" and inputs[7] else None
    if inputs[4] or (op == "LSTM" and inputs[7] and p is None):  # sequence_lens; peepholes computed
        return None
    if ctx.attr(i, "clip") is not None or int(ctx.attr(i, "input_forget", 0)):
        return None
    activations = [a.decode() if isinstance(a, bytes) else a for a in (ctx.attr(i, "activations") or [])]
    directions = 2 if ctx.attr(i, "direction", "forward") == "bidirectional" else 1
    if activations and activations != _DEFAULT_ACTIVATIONS[op] * directions:
        return None
    layout = int(ctx.attr(i, "layout", 0))
    steps, batch = (x_shape[0], x_shape[1]) if layout == 0 else (x_shape[1], x_shape[0])
    gates, hidden = _GATES[op], int(r.shape[-1])
    if steps > _MAX_STEPS or w.shape[0] != directions or w.shape[1] != gates * hidden:
        return None
    if steps * r.astype(np.float32).nbytes > _MAX_STEP_WEIGHT_BYTES:  # r holds every direction
        return None
    if b is None:
        b = np.zeros((directions, 2 * gates * hidden), np.float32)
    return _Cell(
        op,
        int(steps),
        int(batch),
        hidden,
        directions,
        layout,
        w.astype(np.float32),
        r.astype(np.float32),
        b.astype(np.float32),
        bool(int(ctx.attr(i, "linear_before_reset", 0))),
        None if p is None else p.astype(np.float32),
    )


class _Emit:
    """Writes one match's nodes; each distinct constant (a slice bound, a direction's weights) is one
    initializer, however many steps read it."""

    def __init__(self, ctx: Context, m: Match) -> None:
        self.ctx, self.m, self.made = ctx, m, dict[str, str]()

    def const(self, key: str, make: Any) -> str:
        if key not in self.made:
            self.made[key] = self.ctx.const(self.m, f"{self.m.anchor}/{key}", make())
        return self.made[key]

    def index(self, k: int) -> str:
        """A scalar index: Gather with it drops the axis (Squeeze's axes moved from attribute to input
        at opset 13; Gather reads the same at every opset)."""
        import numpy as np

        return self.const(f"i{k}", lambda: np.asarray(k, dtype=np.int64))

    def ints(self, values: list[int]) -> str:
        return self.const("x".join(map(str, values)), lambda: int64_array(values))

    def op(self, op: str, inputs: list[str], outputs: list[str] | None = None, **attrs: Any) -> str:
        return self.ctx.node(self.m, op, inputs, outputs, **attrs)

    def columns(self, tensor: str, start: int, end: int) -> str:
        """tensor[:, start:end]"""
        return self.op("Slice", [tensor, self.ints([start]), self.ints([end]), self.ints([1])])


def _constant(ctx: Context, name: str) -> np.ndarray | None:
    """A constant's value, the large weights the graph facts leave unread included."""
    value = ctx.facts.value(name)
    if value is not None or name not in ctx.facts.const_tensors:
        return value
    from onnx import numpy_helper

    found = next((t for t in ctx.model.graph.initializer if t.name == name), None)
    return None if found is None else numpy_helper.to_array(found)


def _unroll(ctx: Context, m: Match, i: int, cell: _Cell) -> None:
    node = ctx.nodes[i]
    e = _Emit(ctx, m)
    inputs = list(node.input) + [""] * (8 - len(node.input))
    outputs = list(node.output) + [""] * (3 - len(node.output))
    x = inputs[0]
    if cell.layout == 1:  # [batch, steps, input] -> [steps, batch, input]
        x = e.op("Transpose", [x], perm=[1, 0, 2])
    reverse = ctx.attr(i, "direction", "forward") == "reverse"
    step = _lstm_step if cell.op == "LSTM" else _gru_step
    per_direction = []
    for d in range(cell.directions):
        states = {"h": _initial(e, inputs[5], d, cell), "c": ""}
        if cell.op == "LSTM":
            states["c"] = _initial(e, inputs[6], d, cell)
        projected = _input_projection(e, x, d, cell)
        backwards = reverse or d == 1
        hs: dict[int, str] = {}
        for t in range(cell.steps - 1, -1, -1) if backwards else range(cell.steps):
            xt = e.op("Gather", [projected, e.index(t)], axis=0)  # [batch, gates * hidden]
            states = step(e, xt, states, d, cell)
            hs[t] = states["h"]
        per_direction.append((hs, states))
    _outputs(e, outputs, per_direction, cell)


def _initial(e: _Emit, name: str, d: int, cell: _Cell) -> str:
    """Direction d's initial state [batch, hidden]: from the node's input, or zeros."""
    import numpy as np

    if not name:
        return e.const("zeros", lambda: np.zeros((cell.batch, cell.hidden), np.float32))
    return e.op("Gather", [name, e.index(d)], axis=0 if cell.layout == 0 else 1)


def _input_projection(e: _Emit, x: str, d: int, cell: _Cell) -> str:
    """X W^T + the biases that add outside any gate product, for every step at once: [steps, batch, G*H]
    (a GRU with linear_before_reset keeps its candidate's recurrent bias for the step, inside r * (.))."""
    import numpy as np

    size = _GATES[cell.op] * cell.hidden
    wb, rb = cell.b[d, :size], cell.b[d, size:].copy()
    if cell.op == "GRU" and cell.linear_before_reset:
        rb[2 * cell.hidden :] = 0.0
    weights = e.const(f"W{d}T", lambda: np.ascontiguousarray(cell.w[d].T))
    bias = e.const(f"B{d}", lambda: (wb + rb).astype(np.float32))
    return e.op("Add", [e.op("MatMul", [x, weights]), bias])


def _lstm_step(e: _Emit, xt: str, states: dict[str, str], d: int, cell: _Cell) -> dict[str, str]:
    """Gates i, o, f, c (ONNX's order): C = f*C + i*tanh(c); H = o*tanh(C); peepholes add P_i*C_prev
    and P_f*C_prev to i and f, P_o*C to o."""
    import numpy as np

    h = cell.hidden
    rt = e.const(f"R{d}T", lambda: np.ascontiguousarray(cell.r[d].T))
    gates = e.op("Add", [xt, e.op("MatMul", [states["h"], rt])])
    pre = {k: e.columns(gates, n * h, (n + 1) * h) for n, k in enumerate("iofc")}

    def peep(gate: str, c: str) -> str:
        if cell.p is None:
            return pre[gate]
        k = "iof".index(gate)
        weight = e.const(f"P{d}{gate}", lambda: cell.p[d, k * h : (k + 1) * h].copy())
        return e.op("Add", [pre[gate], e.op("Mul", [weight, c])])

    i, f = e.op("Sigmoid", [peep("i", states["c"])]), e.op("Sigmoid", [peep("f", states["c"])])
    c = e.op("Add", [e.op("Mul", [f, states["c"]]), e.op("Mul", [i, e.op("Tanh", [pre["c"]])])])
    o = e.op("Sigmoid", [peep("o", c)])
    return {"h": e.op("Mul", [o, e.op("Tanh", [c])]), "c": c}


def _gru_step(e: _Emit, xt: str, states: dict[str, str], d: int, cell: _Cell) -> dict[str, str]:
    """Gates z, r, h (ONNX's order): H = (1 - z) * h~ + z * H_prev, h~ from (r * H_prev) R_h^T, or
    r * (H_prev R_h^T + Rb_h) with linear_before_reset."""
    import numpy as np

    h, prev = cell.hidden, states["h"]
    r_zr = e.const(f"R{d}zrT", lambda: np.ascontiguousarray(cell.r[d][: 2 * h].T))
    r_h = e.const(f"R{d}hT", lambda: np.ascontiguousarray(cell.r[d][2 * h :].T))
    zr = e.op("Sigmoid", [e.op("Add", [e.columns(xt, 0, 2 * h), e.op("MatMul", [prev, r_zr])])])
    z, r = e.columns(zr, 0, h), e.columns(zr, h, 2 * h)
    if cell.linear_before_reset:
        rb_h = e.const(f"Rb{d}h", lambda: cell.b[d, 5 * h : 6 * h].astype(np.float32))
        recurrent = e.op("Mul", [r, e.op("Add", [e.op("MatMul", [prev, r_h]), rb_h])])
    else:
        recurrent = e.op("MatMul", [e.op("Mul", [r, prev]), r_h])
    candidate = e.op("Tanh", [e.op("Add", [e.columns(xt, 2 * h, 3 * h), recurrent])])
    # (1 - z) * h~ + z * H_prev  ==  h~ + z * (H_prev - h~)
    return {"h": e.op("Add", [candidate, e.op("Mul", [z, e.op("Sub", [prev, candidate])])]), "c": ""}


def _outputs(
    e: _Emit, outputs: list[str], per_direction: list[tuple[dict[int, str], dict[str, str]]], cell: _Cell
) -> None:
    """Y [steps, directions, batch, hidden], Y_h and Y_c [directions, batch, hidden] (layout 0; layout 1
    puts the batch first), each written under the node's own output name."""
    y, y_h, y_c = outputs
    lead = e.ints([1, cell.batch, cell.hidden])
    if y:
        steps = []
        for t in range(cell.steps):
            at_t = [e.op("Reshape", [hs[t], lead]) for hs, _ in per_direction]
            steps.append(at_t[0] if len(at_t) == 1 else e.op("Concat", at_t, axis=0))
        stacked = e.op("Concat", steps, axis=0) if len(steps) > 1 else steps[0]
        shape = e.ints([cell.steps, cell.directions, cell.batch, cell.hidden])
        if cell.layout == 0:
            e.op("Reshape", [stacked, shape], [y])
        else:
            e.op("Transpose", [e.op("Reshape", [stacked, shape])], [y], perm=[2, 0, 1, 3])
    for name, key in ((y_h, "h"), (y_c, "c")):
        if not name:
            continue
        last = [e.op("Reshape", [states[key], lead]) for _, states in per_direction]
        joined = last[0] if len(last) == 1 else e.op("Concat", last, axis=0)
        if cell.layout == 0:
            e.op("Identity", [joined], [name])
        else:
            e.op("Transpose", [joined], [name], perm=[1, 0, 2])


def rewrites() -> list[Any]:
    """Both recurrent forms, LSTM's first."""
    return [UnrolledRecurrence("LSTM"), UnrolledRecurrence("GRU")]
