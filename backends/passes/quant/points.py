"""Quantization points of a QDQ model, their cheap signal, and the model with some of them kept float.

A point is one place where the quantizer rounds: an activation tensor's Q/DQ pair, or one quantized
weight. The auto search ranks every point, not only compute layers, because the damage can sit in a
tensor no layer owns: a YOLOv8-style head's output Concat joins box coordinates (0-320) and class
scores (0-1) under one uint8 scale of ~1.26, and every score under 0.63 becomes 0.

The cheap signal is the SQNR each point's own rounding leaves in its tensor, measured on the float
model's real values with the point's own scale: for a Concat output, the SQNR of each concatenated
input's slice, worst first (whole-tensor SQNR of that concat is ~45 dB, dominated by the coordinates;
its score slice's is ~0 dB). It only orders candidates: the task metric confirms each one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from backends.passes.quant import weight_signal

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from backends.passes.data import Sample

ACTIVATION, WEIGHT = "activation", "weight"

SIGNAL_SAMPLES = 8
"""Samples the cheap signal is measured on (it only orders candidates; the task metric confirms)."""
SIGNAL_ELEMENTS = 1 << 16
"""Elements per tensor slice and sample the rounding SQNR is computed on (evenly strided)."""


@dataclass(frozen=True)
class Point:
    name: str
    """The float tensor (activation) or the float weight's name."""
    kind: str
    """activation | weight"""
    producer: str
    """Op type writing the tensor (activation) or reading the weight (weight)."""
    quantize_node: str
    """The QuantizeLinear (activation) or DequantizeLinear (weight) node of the point."""

    @property
    def tensor(self) -> str:
        """The tensor as the model names it (the quantizer renames a graph output it quantizes)."""
        name = self.name
        for suffix in ("_QuantizeLinear_Input", "_QuantizeInput"):
            name = name.removesuffix(suffix)
        return name

    @property
    def label(self) -> str:
        return f"{self.kind} {self.tensor}"


@dataclass(frozen=True)
class Signal:
    point: Point
    sqnr_db: float
    """Worst-slice SQNR of the point's own rounding (cheap, local)."""
    range_ratio: float
    """Widest / narrowest concatenated input range (1 for a tensor that concatenates nothing)."""


def points(qdq: onnx.ModelProto) -> list[Point]:
    """Every activation Q/DQ pair and every quantized weight of `qdq` (8/16-bit, not int32 biases)."""
    import onnx

    graph = qdq.graph
    inits = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for t in node.input:
            consumers.setdefault(t, []).append(node)
    found: list[Point] = []
    for node in graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] not in inits:
            source = producer.get(node.input[0])
            found.append(Point(node.input[0], ACTIVATION, source.op_type if source else "input", node.name))
        elif node.op_type == "DequantizeLinear" and node.input[0] in inits:
            if inits[node.input[0]].data_type == onnx.TensorProto.INT32:
                continue  # a bias: its scale is input scale x weight scale, it has no rounding of its own
            users = consumers.get(node.output[0], [])
            name = node.input[0].removesuffix("_quantized")
            found.append(Point(name, WEIGHT, users[0].op_type if users else "?", node.name))
    return found


def _scale_zp(qdq: onnx.ModelProto, node: onnx.NodeProto) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    """(scale, zero point, qmin, qmax, axis) of a Q or DQ node."""
    import numpy as np
    from onnx import numpy_helper

    inits = {t.name: t for t in qdq.graph.initializer}
    scale = numpy_helper.to_array(inits[node.input[1]]).astype(np.float64)
    if len(node.input) > 2 and node.input[2] in inits:
        zp_t = numpy_helper.to_array(inits[node.input[2]])
    else:
        zp_t = np.zeros((), np.uint8)
    info = np.iinfo(zp_t.dtype)
    axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
    return scale, zp_t.astype(np.float64), int(info.min), int(info.max), axis


def _fake_quant(x: np.ndarray, scale: np.ndarray, zp: np.ndarray, lo: int, hi: int, axis: int) -> np.ndarray:
    import numpy as np

    x = x.astype(np.float64)
    if np.ndim(scale) == 1 and scale.size > 1:
        shape = [1] * x.ndim
        shape[axis] = -1
        scale, zp = scale.reshape(shape), np.reshape(zp, shape) if np.ndim(zp) else zp
    return (np.clip(np.round(x / scale) + zp, lo, hi) - zp) * scale


def _sqnr(signal: float, noise: float) -> float:
    if noise <= 0:
        return 200.0
    return 10.0 * math.log10(max(signal, 1e-30) / noise)


def signals(
    qdq: onnx.ModelProto,
    prepared: onnx.ModelProto,
    float_weights: Mapping[str, onnx.TensorProto],
    found: Sequence[Point],
    samples: Sequence[Sample],
) -> list[Signal]:
    """The cheap signal of every point, from one run of the float (prepared) model on `samples`."""
    nodes = {n.name: n for n in qdq.graph.node}
    acts = [p for p in found if p.kind == ACTIVATION]
    probes, probed = _weight_probes(qdq, prepared, float_weights, found, nodes)
    run = _FloatRun.of(qdq, prepared, acts, nodes, probes, probed)
    for values in float_values(prepared, run.needed(), samples[:SIGNAL_SAMPLES]):
        run.add(values)
    out: list[Signal] = []
    for point in found:
        if point.kind == WEIGHT:
            signal = _weight_signal(qdq, nodes, float_weights, probes, point)
        else:
            signal = run.activation_signal(point)
        if signal is not None:
            out.append(signal)
    return out


@dataclass
class _FloatRun:
    """What the float model's run over the signal samples adds up for the cheap signal: per activation
    point, each slice's signal and rounding-noise power; per concatenated input, its value range; and
    the weight probes' readings. Tensors are named as the prepared model names them (`names`)."""

    acts: Sequence[Point]
    names: dict[str, str]
    """QDQ tensor -> the prepared model's tensor, where the quantizer renamed it."""
    concats: dict[str, Any]
    """Output -> Concat node of the prepared model."""
    parts: dict[str, list[str]]
    """An activation that concatenates only computed tensors -> those tensors (its slices)."""
    quant: dict[str, tuple[np.ndarray, np.ndarray, int, int, int]]
    """Activation point -> its Q node's (scale, zero point, qmin, qmax, axis)."""
    probes: dict[str, weight_signal.Probe]
    probed: dict[str, str]
    """Weight -> the activation its probe reads."""
    powers: dict[str, list[float]] = field(default_factory=dict)
    noises: dict[str, list[float]] = field(default_factory=dict)
    ranges: dict[str, list[float]] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        qdq: onnx.ModelProto,
        prepared: onnx.ModelProto,
        acts: Sequence[Point],
        nodes: Mapping[str, onnx.NodeProto],
        probes: dict[str, weight_signal.Probe],
        probed: dict[str, str],
    ) -> _FloatRun:
        names = _float_names(qdq, prepared)
        concats = {n.output[0]: n for n in prepared.graph.node if n.op_type == "Concat"}
        constants = {t.name for t in prepared.graph.initializer}
        parts: dict[str, list[str]] = {}
        for name in {names.get(p.name, p.name) for p in acts} & set(concats):
            inputs = [t for t in concats[name].input if t]
            if all(t not in constants for t in inputs):
                parts[name] = inputs
        quant = {p.name: _scale_zp(qdq, nodes[p.quantize_node]) for p in acts}
        return cls(acts, names, concats, parts, quant, probes, probed)

    def float_name(self, point: Point) -> str:
        return self.names.get(point.name, point.name)

    def joined(self) -> set[str]:
        """Every tensor a measured Concat joins."""
        return {t for ts in self.parts.values() for t in ts}

    def needed(self) -> list[str]:
        """The prepared model's tensors the run must output."""
        wanted = {self.float_name(p) for p in self.acts}
        return sorted(wanted | self.joined() | set(self.probed.values()))

    def add(self, values: Mapping[str, np.ndarray]) -> None:
        """One sample's tensors."""
        for point in self.acts:
            name = self.float_name(point)
            x = values.get(name)
            if x is not None:
                sig, loss = _slice_powers(
                    x, self.parts.get(name), values, self.concats.get(name), *self.quant[point.name]
                )
                self._add_rounding(point.name, sig, loss)
        for weight_name, reading in self.probes.items():
            if self.probed[weight_name] in values:
                reading.add(values[self.probed[weight_name]])
        for tensor in self.joined():
            if tensor in values:
                self._add_range(tensor, values[tensor])

    def _add_rounding(self, point: str, sig: list[float], loss: list[float]) -> None:
        for acc, got in ((self.powers, sig), (self.noises, loss)):
            have = acc.setdefault(point, [0.0] * len(got))
            acc[point] = [a + b for a, b in zip(have, got, strict=True)]

    def _add_range(self, tensor: str, x: np.ndarray) -> None:
        import numpy as np

        lo, hi = float(np.min(x)), float(np.max(x))
        seen = self.ranges.setdefault(tensor, [lo, hi])
        self.ranges[tensor] = [min(seen[0], lo), max(seen[1], hi)]

    def activation_signal(self, point: Point) -> Signal | None:
        """The worst slice's SQNR over the run, and the spread of the concatenated ranges; None for a
        tensor the run never saw."""
        if point.name not in self.powers:
            return None
        db = min(_sqnr(a, b) for a, b in zip(self.powers[point.name], self.noises[point.name], strict=True))
        return Signal(point, db, self._range_ratio(self.parts.get(self.float_name(point))))

    def _range_ratio(self, pieces: Sequence[str] | None) -> float:
        """Widest / narrowest non-constant range among the concatenated inputs (1 without two)."""
        if not pieces or not all(t in self.ranges for t in pieces):
            return 1.0
        live = [
            self.ranges[t][1] - self.ranges[t][0] for t in pieces if self.ranges[t][1] > self.ranges[t][0]
        ]
        return max(live) / min(live) if len(live) > 1 else 1.0


def _weight_signal(
    qdq: onnx.ModelProto,
    nodes: Mapping[str, onnx.NodeProto],
    float_weights: Mapping[str, onnx.TensorProto],
    probes: Mapping[str, weight_signal.Probe],
    point: Point,
) -> Signal | None:
    """The SQNR the weight's rounding leaves in its reader's output when a probe read anything, else in
    the weight itself; None for a weight the float model does not hold."""
    import numpy as np
    from onnx import numpy_helper

    weight = float_weights.get(point.name)
    if weight is None:
        return None
    probe = probes.get(point.name)
    if probe is not None and probe.signal > 0:
        return Signal(point, probe.sqnr_db(), 1.0)
    scale, zp, lo_q, hi_q, axis = _scale_zp(qdq, nodes[point.quantize_node])
    w = numpy_helper.to_array(weight).astype(np.float64)
    rounding = float(np.sum((w - _fake_quant(w, scale, zp, lo_q, hi_q, axis)) ** 2))
    return Signal(point, _sqnr(float(np.sum(w**2)), rounding), 1.0)


def _weight_probes(
    qdq: onnx.ModelProto,
    prepared: onnx.ModelProto,
    float_weights: Mapping[str, onnx.TensorProto],
    found: Sequence[Point],
    nodes: Mapping[str, onnx.NodeProto],
) -> tuple[dict[str, weight_signal.Probe], dict[str, str]]:
    """A probe per weight a linear op multiplies (its output SQNR), and the activation each reads."""
    import numpy as np
    from onnx import numpy_helper

    constants = {t.name for t in prepared.graph.initializer}
    weights = [p for p in found if p.kind == WEIGHT and p.name in float_weights]
    readers_of = weight_signal.readers(prepared, [p.name for p in weights])
    inputs_of = weight_signal.weight_inputs(readers_of, constants)
    init = {t.name: t for t in prepared.graph.initializer}
    probes: dict[str, weight_signal.Probe] = {}
    for point in weights:
        if point.name not in inputs_of:
            continue
        node = readers_of[point.name]
        scale, zp, lo_q, hi_q, axis = _scale_zp(qdq, nodes[point.quantize_node])
        w = numpy_helper.to_array(float_weights[point.name]).astype(np.float64)
        bias = {n: numpy_helper.to_array(init[n]) for n in node.input if n in init and n != point.name}
        probes[point.name] = weight_signal.Probe(node, w, _fake_quant(w, scale, zp, lo_q, hi_q, axis), bias)
    return probes, {w: inputs_of[w] for w in probes}


def _float_names(qdq: onnx.ModelProto, prepared: onnx.ModelProto) -> dict[str, str]:
    """QDQ tensor -> the prepared model's tensor: the quantizer renames a graph output it quantizes
    (`<name>_QuantizeInput`), so tensors are matched by the node that writes them."""
    written = {n.name: list(n.output) for n in prepared.graph.node}
    out: dict[str, str] = {}
    for node in qdq.graph.node:
        before = written.get(node.name)
        if before is None or len(before) != len(node.output):
            continue
        for mine, theirs in zip(node.output, before, strict=True):
            if mine != theirs:
                out[mine] = theirs
    return out


def _slice_powers(
    x: np.ndarray,
    pieces: Sequence[str] | None,
    values: Mapping[str, np.ndarray],
    concat: Any,
    scale: np.ndarray,
    zp: np.ndarray,
    lo: int,
    hi: int,
    axis: int,
) -> tuple[list[float], list[float]]:
    """Signal and noise power of the rounding of one sample's tensor, per concatenated input's slice
    (one slice otherwise), on at most SIGNAL_ELEMENTS evenly strided elements of each slice."""
    import numpy as np

    slices = [x]
    if pieces:
        cat_axis = next((a.i for a in concat.attribute if a.name == "axis"), 0) % x.ndim
        bounds = np.cumsum([0, *(values[t].shape[cat_axis] for t in pieces)])
        slices = []
        for k in range(len(pieces)):
            index = [slice(None)] * x.ndim
            index[cat_axis] = slice(int(bounds[k]), int(bounds[k + 1]))
            slices.append(x[tuple(index)])
    sig, noise = [], []
    for part in slices:
        flat = part.ravel() if np.ndim(scale) == 0 or np.size(scale) == 1 else None
        if flat is None:  # a per-axis activation scale: the whole slice, in its shape
            v, q = part.astype(np.float64), _fake_quant(part, scale, zp, lo, hi, axis)
        else:
            if flat.size > SIGNAL_ELEMENTS:
                flat = flat[:: flat.size // SIGNAL_ELEMENTS]
            v = flat.astype(np.float64)
            q = _fake_quant(v, np.reshape(scale, ()), np.reshape(zp, ()), lo, hi, 0)
        sig.append(float(np.sum(v**2)))
        noise.append(float(np.sum((v - q) ** 2)))
    return sig, noise


def float_values(
    prepared: onnx.ModelProto, names: Sequence[str], samples: Sequence[Sample]
) -> Iterator[dict[str, np.ndarray]]:
    """`names` (intermediate tensors) of the float model, one sample at a time (bounded memory)."""
    import onnx
    import onnxruntime as ort

    model = onnx.ModelProto()
    model.CopyFrom(prepared)
    present = {o.name for o in model.graph.output}
    produced = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}
    extra = [n for n in names if n not in present and n in produced]
    model.graph.output.extend(
        onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in extra
    )
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # keep every tensor
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    outputs = [o.name for o in session.get_outputs()]
    keep = set(names)
    for sample in samples:
        got = session.run(outputs, sample.feed)
        yield {name: value for name, value in zip(outputs, got, strict=True) if name in keep}


def kept_float(
    qdq: onnx.ModelProto, chosen: Iterable[Point], float_weights: Mapping[str, onnx.TensorProto]
) -> bytes:
    """`qdq` with the chosen points not rounded: their Q/DQ pairs bypassed, their weights restored
    from the float model; dead Q/DQ nodes and initializers are pruned. Points are matched by tensor
    name, so they apply to any build of the same prepared model. The build must keep the Relu/Clip
    nodes the quantizer would fold into Q ranges (QDQKeepRemovableActivations), or bypassing a pair
    drops their clipping."""
    import onnx

    from backends.passes.quant.float_keep import prune

    model = onnx.ModelProto()
    model.CopyFrom(qdq)
    graph = model.graph
    outputs = {o.name for o in graph.output}
    acts = {p.name for p in chosen if p.kind == ACTIVATION}
    weights = {p.name for p in chosen if p.kind == WEIGHT}
    producer = {o: n for n in graph.node for o in n.output}
    rewire: dict[str, str] = {}
    added: dict[str, onnx.TensorProto] = {}
    for node in graph.node:
        if node.op_type != "DequantizeLinear":
            continue
        q = producer.get(node.input[0])
        if q is not None and q.op_type == "QuantizeLinear" and q.input[0] in acts:
            rewire[node.output[0]] = q.input[0]
        elif (name := node.input[0].removesuffix("_quantized")) in weights and name in float_weights:
            fresh = onnx.TensorProto()
            fresh.CopyFrom(float_weights[name])
            fresh.name = name + "__float"
            added.setdefault(fresh.name, fresh)
            rewire[node.output[0]] = fresh.name
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in rewire:
                node.input[k] = rewire[name]
    for dq in graph.node:  # a graph output written by a bypassed DQ becomes an Identity of the float tensor
        if dq.op_type == "DequantizeLinear" and dq.output[0] in outputs and dq.output[0] in rewire:
            source = rewire[dq.output[0]]
            dq.op_type, dq.domain = "Identity", ""
            del dq.attribute[:]
            del dq.input[:]
            dq.input.append(source)
    graph.initializer.extend(added[k] for k in sorted(added))
    prune(model)
    return bytes(model.SerializeToString())
