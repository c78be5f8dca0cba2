"""A weight's cheap signal measured where its rounding lands: the output of the op that reads it.

Weight-domain SQNR (weight power over rounding power) misses a filter whose taps cancel: the first
conv of ddddocr's text recognizer has 3x3 kernels like [6.3, -10.4, 6.2, 9.6, -20.7, ...] summing to
near 0, so on a flat background its output is mostly bias and each tap's rounding (up to 0.08 at that
channel's scale) leaks straight into it. Per-channel int8, its weights show 47.9 dB, among the finest
of its 21 convs; its output 39.7 dB, the worst, and it is the conv whose weights cost the most decoded
strings when rounded. So a weight a linear op multiplies is ranked by that op's output SQNR on the
float model's own input values (the op alone, its own attributes, in ONNX Runtime). The probe is a
best effort: an op that ONNX Runtime will not run alone (a shape it cannot infer, a type it lacks)
keeps its weight-domain SQNR rather than stopping the search.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import onnx

LINEAR_OPS = {"Conv": 1, "ConvTranspose": 1, "Gemm": 1, "MatMul": 1}
"""Op type -> the input index a weight it multiplies sits at (other readers keep weight-domain SQNR)."""


def readers(prepared: onnx.ModelProto, weights: Sequence[str]) -> dict[str, onnx.NodeProto]:
    """Weight -> the one linear op of the float model that multiplies it (shared weights are left out:
    their damage has no single output)."""
    found: dict[str, list[onnx.NodeProto | None]] = {}
    wanted = set(weights)
    for node in prepared.graph.node:
        for k, name in enumerate(node.input):
            if name in wanted:
                linear = node.domain in ("", "ai.onnx") and LINEAR_OPS.get(node.op_type) == k
                found.setdefault(name, []).append(node if linear else None)
    out: dict[str, onnx.NodeProto] = {}
    for w, nodes in found.items():
        if len(nodes) == 1 and nodes[0] is not None:
            out[w] = nodes[0]
    return out


class Probe:
    """One weight's output SQNR, accumulated a sample at a time (activations are never held)."""

    def __init__(
        self, node: onnx.NodeProto, weight: np.ndarray, rounded: np.ndarray, constants: Mapping[str, Any]
    ) -> None:
        import numpy as np

        self.weight = weight.astype(np.float32)
        self.error = (weight.astype(np.float64) - rounded).astype(np.float32)
        self.node, self.constants = node, constants
        self.sessions: tuple[Any, Any] | None = None
        self.failed = False
        self.signal = self.noise = 0.0

    def add(self, x: np.ndarray) -> None:
        """Accumulate one sample; a probe ONNX Runtime cannot build or run stops measuring (signal
        stays 0, so its caller falls back to the weight-domain SQNR)."""
        import numpy as np

        if self.failed:
            return
        try:
            if self.sessions is None:
                self.sessions = _sessions(self.node, self.weight.shape, x.shape, self.constants)
            full, bare = self.sessions
            x = x.astype(np.float32)
            y = full.run(None, {"x": x, "w": self.weight})[0].astype(np.float64)
            e = bare.run(None, {"x": x, "w": self.error})[0].astype(np.float64)
        except Exception:  # noqa: BLE001 -- any ORT refusal means "no output signal", not an error
            self.failed, self.sessions = True, None
            self.signal = self.noise = 0.0
            return
        self.signal += float(np.sum(y**2))
        self.noise += float(np.sum(e**2))

    def sqnr_db(self) -> float:
        import math

        if self.noise <= 0:
            return 200.0
        return 10.0 * math.log10(max(self.signal, 1e-30) / self.noise)


def _sessions(
    node: onnx.NodeProto, w_shape: Sequence[int], x_shape: Sequence[int], constants: Mapping[str, Any]
) -> tuple[Any, Any]:
    """The op alone as two sessions: with its constant inputs (bias) and without them (the
    rounding error's own output, by linearity)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    full, bare = (
        ort.InferenceSession(
            _op_model(node, w_shape, x_shape, constants, bias), options, providers=["CPUExecutionProvider"]
        )
        for bias in (True, False)
    )
    return full, bare


def _op_model(
    node: onnx.NodeProto,
    w_shape: Sequence[int],
    x_shape: Sequence[int],
    constants: Mapping[str, Any],
    bias: bool,
) -> bytes:
    import numpy as np
    import onnx

    k = LINEAR_OPS[node.op_type]
    activation = activation_index(node, constants)
    wired: list[str] = []
    initializers = []
    for i, name in enumerate(node.input):
        if i == activation:
            wired.append("x")
        elif i == k:
            wired.append("w")
        elif bias and name in constants:
            wired.append(f"c{i}")
            value = np.asarray(constants[name])
            if value.dtype.kind == "f":  # the probe runs in float32 whatever the model's float type
                value = value.astype(np.float32)
            initializers.append(onnx.numpy_helper.from_array(value, f"c{i}"))
        else:
            wired.append("")
    while wired and not wired[-1]:
        wired.pop()
    op = onnx.helper.make_node(node.op_type, wired, ["y"])
    op.attribute.extend(node.attribute)
    graph = onnx.helper.make_graph(
        [op],
        "weight_signal",
        [
            onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x_shape)),
            onnx.helper.make_tensor_value_info("w", onnx.TensorProto.FLOAT, list(w_shape)),
        ],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        initializers,
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def activation_index(node: onnx.NodeProto, constants: Container[str]) -> int | None:
    """The input of a linear op that is not its weight and not a constant: the activation."""
    k = LINEAR_OPS[node.op_type]
    return next((i for i, n in enumerate(node.input) if i != k and n and n not in constants), None)


def weight_inputs(readers_of: Mapping[str, onnx.NodeProto], constants: Container[str]) -> dict[str, str]:
    """Weight -> the activation tensor its reader multiplies it with (the one value to record)."""
    out: dict[str, str] = {}
    for weight, node in readers_of.items():
        i = activation_index(node, constants)
        if i is not None:
            out[weight] = node.input[i]
    return out
