"""Runs inside the managed tflite venv, loaded by worker.py: where each kept ONNX node is in a TFLite.

Standalone like the worker (numpy, onnx, onnxruntime, ai_edge_litert). onnx2tf renames layers after the
TF ops it emits (`model_3/tf.nn.convolution_1/...`), so names cannot say which TFLite op computes an
ONNX node; values can: the node's output on one sample equals exactly the output of the op computing it.
"""

from __future__ import annotations

from typing import Any


def locate(model_path: str, tflite: bytes, keep: list[str], feed: dict[str, Any]) -> dict[str, Any]:
    """Each kept ONNX node's TFLite op, found by value: the node's output computed by ONNX Runtime on
    one calibration sample equals (in ONNX or channels-last layout) the output of exactly the TFLite
    op that computes it. A node TFLite fused into a later op (Conv into Conv+BN+Relu) has no tensor of
    its own: the op that absorbed it is the first consumer down its single-consumer chain that does.
    onnx2tf renames layers after TF ops, so names cannot say this."""
    import onnx

    model = onnx.load(model_path, load_external_data=False)
    nodes = {n.name: n for n in model.graph.node}
    missing = [name for name in keep if name not in nodes]
    if missing:
        raise ValueError(f"kept layer {missing[0]!r} is not a node of the model")
    values = _onnx_values(model, feed)
    produced = _tflite_values(tflite, feed)
    consumers: dict[str, list[Any]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    graph_outputs = {o.name for o in model.graph.output}
    found: dict[str, Any] = {}
    for name in keep:
        node, path = nodes[name], [name]
        while True:
            hit = _match(values.get(node.output[0]), produced) if node.output else None
            if hit is not None:
                found[name] = {"tflite": hit[0], "op": hit[1], "via": path}
                break
            after = consumers.get(node.output[0], []) if node.output else []
            if len(after) != 1 or node.output[0] in graph_outputs:
                raise ValueError(
                    f"kept layer {name!r} has no counterpart in the TFLite model (no TFLite op computes "
                    f"its output {node.output[0] if node.output else ''!r} or a fused successor's)"
                )
            node = after[0]
            path.append(node.name)
    return found


def _onnx_values(model: Any, feed: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import onnx
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    for node in probe.graph.node:
        for name in node.output:
            if name and name not in known:
                probe.graph.output.append(onnx.helper.make_value_info(name, onnx.TypeProto()))
                known.add(name)
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    feeds = {k: np.asarray(v, dtype=np.float32) for k, v in feed.items()}
    return {n: v for n, v in zip(names, session.run(names, feeds), strict=True) if isinstance(v, np.ndarray)}


def _tflite_values(tflite: bytes, feed: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """(tensor name, op name, value) of every op's float output, in execution order."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=tflite, experimental_preserve_all_tensors=True)
    interpreter.allocate_tensors()
    inputs = interpreter.get_input_details()
    for detail, value in zip(inputs, _ordered(inputs, feed), strict=True):
        x = np.asarray(value, dtype=np.float32)
        if x.ndim >= 3 and list(x.shape) != list(detail["shape"]):
            x = x.transpose(0, *range(2, x.ndim), 1)
        interpreter.set_tensor(detail["index"], x)
    interpreter.invoke()
    tensors = {d["index"]: d for d in interpreter.get_tensor_details()}
    out = []
    for op in interpreter._get_ops_details():
        for index in op["outputs"]:
            detail = tensors.get(int(index))
            if detail is not None and detail["dtype"] == np.float32:
                out.append((detail["name"], op["op_name"], interpreter.get_tensor(int(index))))
    return out


def _ordered(inputs: list[dict[str, Any]], feed: dict[str, Any]) -> list[Any]:
    """The feed in the TFLite's input order: by name (TF's converter writes `serving_default_<name>:0`),
    else by position."""

    def named(tensor: str) -> Any:
        bare = tensor.removeprefix("serving_default_").rsplit(":", 1)[0]
        return feed.get(tensor, feed.get(bare))

    by_name = [named(d["name"]) for d in inputs]
    return by_name if all(v is not None for v in by_name) else list(feed.values())


def _match(value: Any, produced: list[tuple[str, str, Any]]) -> tuple[str, str] | None:
    """The first op whose output equals `value` in ONNX or channels-last layout (float32 tolerance)."""
    import numpy as np

    if value is None or value.dtype != np.float32 or value.size == 0:
        return None
    layouts = [value]
    if value.ndim >= 3:
        layouts.append(value.transpose(0, *range(2, value.ndim), 1))
    atol = 1e-4 * max(1.0, float(np.max(np.abs(value))))
    for name, op, got in produced:
        if any(got.shape == x.shape and np.allclose(got, x, rtol=1e-3, atol=atol) for x in layouts):
            return name, op
    return None


def tensor_dtypes(tflite: bytes) -> dict[str, str]:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=tflite)
    return {d["name"]: d["dtype"].__name__ for d in interpreter.get_tensor_details()}
