"""Input shapes fixed from the spec and every other shape inferred from them, strictly.

Later stages need every tensor statically shaped (QNN refuses a graph with one symbolic inner tensor,
"Dynamic shape is not supported"); where onnx's own inference stops at a shape computation (Shape ->
Cast -> Slice -> Reshape ...), a copy with those small computations evaluated gives the dims, and they
are written into the model's own value_info and outputs: the graph itself is left as the exporter
wrote it (node names and counts are what the later stages' reports refer to).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from backends.sdk.errors import TerminalError, one_line

if TYPE_CHECKING:
    import numpy as np
    import onnx

Logger = Callable[[str], None]

_DEFAULT_DOMAINS = ("", "ai.onnx")
_FOLD_MAX_ELEMENTS = 4096
"""Shape-computation constants larger than this are not folded when inferring output shapes."""
_NONDETERMINISTIC_OPS = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
)


def is_fixed(dim: Any) -> bool:
    return bool(dim.HasField("dim_value") and dim.dim_value > 0)


def fix_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> list[str]:
    """Sets every input to its spec shape; returns the inputs whose fixed dims the spec re-declared,
    as `name [old] -> [new]`. Exporters often write a placeholder size into a graph that computes at
    any size (a fully convolutional detector exported at [10, 3, 32, 32] and run at the camera's
    frame), so a fixed dim is re-declared, not refused: strict shape inference then checks that the
    graph computes at the spec's shape (a Reshape or weight that needs the old size fails it, naming
    the node). Unknown input names, rank mismatches and inputs left dynamic are errors."""
    inputs = {inp.name: inp for inp in model.graph.input}
    unknown = sorted(set(shapes) - set(inputs))
    if unknown:
        raise TerminalError(
            f"spec.inputs names {', '.join(unknown)}, not an input of the model "
            f"(model inputs: {', '.join(inputs) or 'none'})"
        )
    redeclared = []
    for name, inp in inputs.items():
        if not inp.type.HasField("tensor_type"):
            raise TerminalError(f"model input {name!r} is not a tensor; npuctl handles tensor inputs only")
        tensor_type = inp.type.tensor_type
        if name not in shapes:
            dims = tensor_type.shape.dim
            if not tensor_type.HasField("shape") or not all(is_fixed(d) for d in dims):
                raise TerminalError(
                    f"model input {name!r} has dynamic dimensions: give its shape in spec.inputs"
                )
            continue
        was = _declared(tensor_type)
        if _fix_one(name, tensor_type, list(shapes[name])):
            redeclared.append(f"{name} {was} -> {list(shapes[name])}")
    return redeclared


def _declared(tensor_type: Any) -> str:
    return "[" + ", ".join(str(d.dim_value) if is_fixed(d) else "?" for d in tensor_type.shape.dim) + "]"


def _fix_one(name: str, tensor_type: Any, shape: list[int]) -> bool:
    """Writes `shape` into the input; whether it changed a dim the model had fixed."""
    changed = False
    if tensor_type.HasField("shape"):
        dims = tensor_type.shape.dim
        if len(dims) != len(shape):
            raise TerminalError(
                f"spec.inputs.{name} has rank {len(shape)} ({shape}), the model input has rank {len(dims)}"
            )
        changed = any(is_fixed(d) and d.dim_value != want for d, want in zip(dims, shape, strict=True))
    tensor_type.ClearField("shape")
    tensor_type.shape.SetInParent()  # a rank-0 input has a shape with no dims, not no shape
    for value in shape:
        tensor_type.shape.dim.add().dim_value = value
    return changed


def infer_shapes(model: onnx.ModelProto, log: Logger = print) -> onnx.ModelProto:
    """Strict shape inference from the fixed inputs; output dims that onnx cannot infer by itself
    (shape subgraphs through Cast/Slice) are completed from a copy with those subgraphs folded."""
    del model.graph.value_info[:]
    for out in model.graph.output:  # the exporter's declared output shapes, rank included, are often wrong
        if out.type.HasField("tensor_type"):
            out.type.tensor_type.ClearField("shape")
    model = _strict_inference(model)
    if all(_static_shape(v) is not None for v in [*model.graph.value_info, *model.graph.output]):
        return model
    try:
        folded = _fold_shape_computations(model, log)
    except Exception as exc:  # best effort: the shapes just stay unknown
        log(f"shape folding failed: {one_line(exc)}")
        folded = model
    known = {v.name: _static_shape(v) for v in [*folded.graph.value_info, *folded.graph.output]}
    filled = sum(_set_static(v, known.get(v.name)) for v in [*model.graph.value_info, *model.graph.output])
    if filled:
        model = _strict_inference(model)
        log(f"{filled} tensor shape(s) completed by folding shape computations")
    still = [o.name for o in model.graph.output if _static_shape(o) is None]
    if still:
        log(f"output shapes left data-dependent: {', '.join(still)}")
    inner = sum(_static_shape(v) is None for v in model.graph.value_info)
    if inner:
        log(f"{inner} inner tensor shape(s) left data-dependent")
    return model


def _set_static(value_info: Any, shape: list[int] | None) -> bool:
    """Writes `shape` into a value whose own shape is not static; whether it did."""
    if shape is None or _static_shape(value_info) is not None or not value_info.type.HasField("tensor_type"):
        return False
    value_info.type.tensor_type.ClearField("shape")
    value_info.type.tensor_type.shape.SetInParent()
    for value in shape:
        value_info.type.tensor_type.shape.dim.add().dim_value = value
    return True


def _strict_inference(model: onnx.ModelProto) -> onnx.ModelProto:
    import onnx.shape_inference

    try:
        return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception as exc:  # InferenceError and C++ errors alike
        raise TerminalError(f"shape inference failed with the spec's input shapes: {one_line(exc)}") from exc


def _static_shape(value_info: Any) -> list[int] | None:
    tensor_type = value_info.type.tensor_type
    if not value_info.type.HasField("tensor_type") or not tensor_type.HasField("shape"):
        return None
    dims = list(tensor_type.shape.dim)
    if not all(is_fixed(d) for d in dims):
        return None
    return [int(d.dim_value) for d in dims]


def _fold_shape_computations(model: onnx.ModelProto, log: Logger) -> onnx.ModelProto:
    """A copy of `model` where Shape nodes of statically shaped tensors and the small constant
    computations on them are evaluated (onnx.reference), so inference can see the shapes they make."""
    import onnx

    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    for _ in range(16):
        folded = onnx.shape_inference.infer_shapes(folded, data_prop=True)
        count = _fold_once(folded, log)
        if count == 0:
            break
        del folded.graph.value_info[:]
    return onnx.shape_inference.infer_shapes(folded, data_prop=True)


def _fold_once(model: onnx.ModelProto, log: Logger) -> int:
    from onnx import numpy_helper

    infos = {v.name: v for v in [*model.graph.value_info, *model.graph.input]}
    infos.update(_initializer_infos(model))  # Shape of a weight: its dims, whether or not its bytes are here
    known: dict[str, np.ndarray] = {  # weights held outside the proto are never shape computations
        t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.data_location != t.EXTERNAL
    }
    keep, count = [], 0
    for node in model.graph.node:
        values = _fold_node(model, node, infos, known, log)
        if values is None:
            keep.append(node)
            continue
        for name, value in zip(node.output, values, strict=False):
            known[name] = value
            model.graph.initializer.append(numpy_helper.from_array(value, name))
        count += 1
    if count:
        del model.graph.node[:]
        model.graph.node.extend(keep)
    return count


def _initializer_infos(model: onnx.ModelProto) -> dict[str, Any]:
    from onnx import helper

    return {
        t.name: helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        for t in model.graph.initializer
    }


def _fold_node(
    model: onnx.ModelProto, node: Any, infos: Mapping[str, Any], known: Mapping[str, np.ndarray], log: Logger
) -> list[np.ndarray] | None:
    import numpy as np

    if node.domain not in _DEFAULT_DOMAINS or node.op_type in _NONDETERMINISTIC_OPS:
        return None
    if node.op_type == "Shape" and node.input[0] in infos:
        shape = _static_shape(infos[node.input[0]])
        if shape is None:
            return None
        attrs = {a.name: a.i for a in node.attribute}
        start, end = attrs.get("start", 0), attrs.get("end", len(shape))
        return [np.array(shape[start:end], dtype=np.int64)]
    if any(a.type in (5, 10) for a in node.attribute):  # GRAPH / GRAPHS: control flow
        return None
    used = [name for name in node.input if name]
    if not all(name in known for name in used):
        return None
    if sum(known[name].size for name in used) > _FOLD_MAX_ELEMENTS:
        return None
    values = _evaluate_node(model, node, {name: known[name] for name in used}, log)
    if values is None or any(v.size > _FOLD_MAX_ELEMENTS for v in values):
        return None
    return values


def _evaluate_node(
    model: onnx.ModelProto, node: Any, feeds: dict[str, np.ndarray], log: Logger
) -> list[np.ndarray] | None:
    import numpy as np
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    inputs = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for k, v in feeds.items()
    ]
    outputs = [helper.make_value_info(name, onnx.TypeProto()) for name in node.output]
    graph = helper.make_graph([node], "fold", inputs, outputs)
    single = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    try:
        results = ReferenceEvaluator(single).run(None, feeds)
    except Exception as exc:  # an op the reference evaluator lacks just stays unfolded
        log(f"shape folding skipped {node.op_type} {node.name}: {one_line(exc)}")
        return None
    return [np.asarray(r) for r in results]
