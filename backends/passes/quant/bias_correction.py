"""Bias correction after ptq: each quantized Conv and Gemm's mean output shift per channel, measured on
calibration samples, folded into its int32 bias (as NNCF's FastBiasCorrection does by default).

Rounding a layer's weights to int8 moves the mean of its output wherever its input's mean is not zero
(every layer after a ReLU or a sigmoid): a systematic error each later layer carries on, which rounding
noise of zero mean is not. Each layer is measured alone: a copy of it, with its own input Q/DQ, its
int8 weights and its bias, is fed the float model's input to it, beside the float layer, in one graph.
So a layer's shift does not depend on which other layers a search keeps float: it is measured once from
the first build, and every build (each search candidate and the artifact) gets the same correction.
The probe holds the whole float model, so its outputs on the first samples come with the shifts: the
stage's check scores the int8 build against them instead of running the float model again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from backends.sdk.errors import TerminalError, one_line

if TYPE_CHECKING:
    import onnx

    from backends.passes.accuracy import ModelOutputs
    from backends.passes.data import Sample

SAMPLES = 32
"""Calibration samples the shifts are averaged over: a per-channel mean settles within a few dozen."""

LAYER_OPS = ("Conv", "Gemm")
"""Ops whose bias the QDQ quantizer writes as int32 behind a DequantizeLinear."""


@dataclass(frozen=True)
class Shift:
    """One layer's measured mean error per output channel (float - int8), and its bias in int32 steps."""

    node: str
    bias: str
    delta: np.ndarray
    steps: np.ndarray


@dataclass(frozen=True)
class Measured:
    """The shifts, and the float model's outputs on the first samples (the probe computed them)."""

    shifts: list[Shift]
    reference: ModelOutputs | None
    """Per sample, the float model's graph outputs (names in the model's order), for the first
    `keep` samples measure was asked to keep; None when none were asked for or no layer was probed."""


@dataclass(frozen=True)
class _Layer:
    node: onnx.NodeProto
    chain: list[onnx.NodeProto]
    """The layer's input QuantizeLinear and the DequantizeLinear nodes of its three inputs, then itself."""
    float_output: str
    """The same-named node's output in the float model (the quantizer renames outputs it folds a Relu
    into or puts a Q/DQ pair behind)."""
    bias: str
    bias_scale: str
    channel_axis: int
    rank: int


def _producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    return {t: n for n in graph.node for t in n.output if t}


def _layers(qdq: onnx.ModelProto, float_tensors: set[str], float_nodes: Mapping[str, str]) -> list[_Layer]:
    """The quantized Conv/Gemm nodes whose activation comes through Q/DQ from a tensor the float model
    has, with int8 weights and an int32 bias: what a copy can be built of."""
    from onnx import TensorProto

    graph = qdq.graph
    made = _producers(graph)
    inits = {t.name: t for t in graph.initializer}
    found = []
    for node in graph.node:
        if node.op_type not in LAYER_OPS or len(node.input) < 3 or not node.input[2]:
            continue
        dq_x, dq_w, dq_b = (made.get(t) for t in node.input[:3])
        if any(n is None or n.op_type != "DequantizeLinear" for n in (dq_x, dq_w, dq_b)):
            continue
        assert dq_x is not None and dq_w is not None and dq_b is not None
        q_x = made.get(dq_x.input[0])
        bias = inits.get(dq_b.input[0])
        if q_x is None or q_x.op_type != "QuantizeLinear" or q_x.input[0] not in float_tensors:
            continue
        if (
            bias is None
            or bias.data_type != TensorProto.INT32
            or len(bias.dims) != 1
            or dq_w.input[0] not in inits
        ):
            continue
        float_output = float_nodes.get(node.name)
        if float_output is None:
            continue  # no float node of that name to compare with
        weight = inits[dq_w.input[0]]
        gemm = node.op_type == "Gemm"
        found.append(
            _Layer(
                node,
                [q_x, dq_x, dq_w, dq_b, node],
                float_output,
                bias.name,
                dq_b.input[1],
                1,
                2 if gemm else len(weight.dims),
            )
        )
    return found


def _at_opset_of(prepared: onnx.ModelProto, qdq: onnx.ModelProto) -> onnx.ModelProto:
    """`prepared` at the QDQ model's ONNX opset. ONNX Runtime's quantizer converts the model it
    quantizes to opset 21 for 16-bit Q/DQ (ONNX's version converter), so the probe's float nodes must
    be in that opset's forms too (a ReduceMin's axes attribute became an input at 18)."""
    import onnx

    from backends.passes.importer import default_opset

    want, had = default_opset(qdq) or 0, default_opset(prepared) or 0
    if want <= had:
        return prepared
    return onnx.version_converter.convert_version(prepared, want)


def _probe(prepared: onnx.ModelProto, qdq: onnx.ModelProto, layers: Sequence[_Layer]) -> onnx.ModelProto:
    """The float model (its own outputs first) plus, per layer, its int8 copy fed the float input and the
    mean over every axis but the channel of (copy - float): one small output per layer."""
    import onnx
    from onnx import helper

    probe = onnx.ModelProto()
    probe.CopyFrom(prepared)
    del probe.opset_import[:]  # the quantizer's: it raises the opset for 16-bit Q/DQ
    probe.opset_import.extend(qdq.opset_import)
    probe.ir_version = max(probe.ir_version, qdq.ir_version)
    inits = {t.name: t for t in qdq.graph.initializer}
    opset = next((o.version for o in probe.opset_import if o.domain in ("", "ai.onnx")), 13)
    for i, layer in enumerate(layers):
        prefix = f"npuctl_bc{i}/"
        local = {t for n in layer.chain for t in n.output}
        for n in layer.chain:
            copy = onnx.NodeProto()
            copy.CopyFrom(n)
            copy.name = prefix + (n.name or n.op_type)
            for k, t in enumerate(n.input):
                if t in local:
                    copy.input[k] = prefix + t
                elif t in inits:
                    copy.input[k] = prefix + t
                    tensor = onnx.TensorProto()
                    tensor.CopyFrom(inits[t])
                    tensor.name = prefix + t
                    probe.graph.initializer.append(tensor)
            for k, t in enumerate(n.output):
                copy.output[k] = prefix + t
            probe.graph.node.append(copy)
        diff = prefix + "diff"
        probe.graph.node.append(
            helper.make_node("Sub", [prefix + layer.node.output[0], layer.float_output], [diff])
        )
        axes = [a for a in range(layer.rank) if a != layer.channel_axis]
        if opset >= 18:
            axes_name = prefix + "axes"
            probe.graph.initializer.append(
                helper.make_tensor(axes_name, onnx.TensorProto.INT64, [len(axes)], axes)
            )
            mean = helper.make_node("ReduceMean", [diff, axes_name], [prefix + "mean"], keepdims=0)
        else:
            mean = helper.make_node("ReduceMean", [diff], [prefix + "mean"], axes=axes, keepdims=0)
        probe.graph.node.append(mean)
        probe.graph.output.append(
            helper.make_tensor_value_info(prefix + "mean", onnx.TensorProto.FLOAT, None)
        )
    return probe


def measure(
    qdq_path: Path, prepared_path: Path, samples: Sequence[Sample], scratch: Path, keep: int = 0
) -> Measured:
    """Each correctable layer's mean shift over `samples` (the first SAMPLES), and the float model's
    outputs on the first `keep` of them."""
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    from backends.passes.accuracy import ModelOutputs

    qdq = onnx.load(str(qdq_path))
    prepared = _at_opset_of(onnx.load(str(prepared_path)), qdq)
    float_tensors = {t for n in prepared.graph.node for t in n.output} | {
        i.name for i in prepared.graph.input
    }
    float_nodes = {n.name: n.output[0] for n in prepared.graph.node if n.output and n.op_type in LAYER_OPS}
    layers = _layers(qdq, float_tensors, float_nodes)
    if not layers or not samples:
        return Measured([], None)
    names = [o.name for o in prepared.graph.output]
    path = scratch / "bias-probe.onnx"
    onnx.save(_probe(prepared, qdq, layers), str(path), save_as_external_data=False)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.disable_quant_qdq", "1")  # the Q/DQ math, as scored
    # threads sleep between kernels instead of spinning (as calibration's do): same kernels, same
    # shifts; busy-waiting threads doubled this probe's CPU time on a shared 2-core host
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    used = samples[:SAMPLES]
    kept = ModelOutputs(names) if keep > 0 else None
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        totals: list[np.ndarray] | None = None
        for k, sample in enumerate(used):
            values = session.run(None, sample.feed)
            if kept is not None and k < keep:
                kept.values.append([np.asarray(v) for v in values[: len(names)]])
            means = [np.asarray(m, np.float64) for m in values[len(names) :]]
            totals = means if totals is None else [a + b for a, b in zip(totals, means, strict=True)]
    except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
        raise TerminalError(
            f"quantization.bias_correction: its probe model did not run ({one_line(exc)}); set "
            "quantization.bias_correction: false to build without it"
        ) from exc
    finally:
        path.unlink(missing_ok=True)
    assert totals is not None
    inits = {t.name: t for t in qdq.graph.initializer}
    shifts = []
    for layer, total in zip(layers, totals, strict=True):
        delta = -(total / len(used))  # float - int8: what the bias must add
        scale = numpy_helper.to_array(inits[layer.bias_scale]).astype(np.float64)
        steps = np.rint(delta / np.where(scale > 0, scale, 1.0)).astype(np.int64)
        if delta.shape != (int(inits[layer.bias].dims[0]),):
            continue
        shifts.append(Shift(layer.node.name, layer.bias, delta.astype(np.float32), steps))
    return Measured(shifts, kept)


def apply(model: onnx.ModelProto, shifts: Sequence[Shift]) -> int:
    """Adds each shift to its layer's int32 bias where the model still quantizes that layer as measured
    (a layer a search keeps float has no int32 bias to correct). Returns the layers corrected."""
    from onnx import numpy_helper

    by_node = {s.node: s for s in shifts}
    inits = {t.name: t for t in model.graph.initializer}
    users: dict[str, int] = {}
    for node in model.graph.node:
        for t in node.input:
            users[t] = users.get(t, 0) + 1
    made = _producers(model.graph)
    done = 0
    for node in model.graph.node:
        shift = by_node.get(node.name)
        if shift is None or len(node.input) < 3:
            continue
        dq = made.get(node.input[2])
        if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] != shift.bias:
            continue
        tensor = inits.get(shift.bias)
        if tensor is None or users.get(shift.bias, 0) != 1:
            continue
        values = numpy_helper.to_array(tensor).astype(np.int64) + shift.steps
        info = np.iinfo(np.int32)
        tensor.CopyFrom(
            numpy_helper.from_array(np.clip(values, info.min, info.max).astype(np.int32), tensor.name)
        )
        done += 1
    return done


def summary(shifts: Sequence[Shift], applied: int, samples: int) -> dict[str, Any]:
    """The report's record: layers measured and corrected, and the largest shift in bias steps."""
    largest = max((int(np.abs(s.steps).max()) for s in shifts if s.steps.size), default=0)
    return {
        "layers_measured": len(shifts),
        "layers_corrected": applied,
        "samples": samples,
        "largest_steps": largest,
    }
