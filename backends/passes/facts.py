"""Static facts about an ONNX graph that placement, constraints, rewrites and the estimate all need.

Which tensors are compile-time constants (initializers, Constant nodes, anything computed only from
them, and Shape/Size of statically shaped tensors), their values when small, and the shape and element
type of every tensor. Shape inference alone loses shapes behind Shape -> Cast -> Concat -> Reshape
chains (common in exported models), so constant subgraphs are evaluated first and fed back as
initializers until nothing more folds; every NPU compiler folds them the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import onnx

MATERIALIZE_LIMIT = 1 << 20
"""Constant tensors with more elements than this are known to be constant but not evaluated."""

_NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
)

DTYPE_BYTES: dict[int, int] = {
    1: 4,
    2: 1,
    3: 1,
    4: 2,
    5: 2,
    6: 4,
    7: 8,
    9: 1,
    10: 2,
    11: 8,
    12: 4,
    13: 8,
    16: 2,
}
"""ONNX TensorProto element type -> bytes per element."""


def node_names(nodes: Sequence[onnx.NodeProto]) -> list[str]:
    """A unique, stable identifier per node: its name, or `<op_type>_<index>` when empty or duplicated."""
    seen: set[str] = set()
    out: list[str] = []
    for i, node in enumerate(nodes):
        name = node.name
        if not name or name in seen:
            name = f"{node.op_type}_{i}"
            while name in seen:
                name += "_"
        seen.add(name)
        out.append(name)
    return out


def name_nodes(model: onnx.ModelProto) -> int:
    """Gives every unnamed or duplicate node its stable identifier as its name, so sensitive-layer rules,
    exclusions and reports address the same nodes at every stage. Returns how many were renamed."""
    renamed = 0
    for node, name in zip(model.graph.node, node_names(model.graph.node), strict=True):
        if node.name != name:
            node.name = name
            renamed += 1
    return renamed


@dataclass
class Facts:
    """What is known about one graph. The bodies of If/Loop/Scan nodes get Facts of their own
    (backends.passes.control_flow), analysed on demand and kept in `body_cache`."""

    model: onnx.ModelProto
    names: list[str]
    """Unique node identifiers, by node index."""
    const_tensors: set[str] = field(default_factory=set)
    values: dict[str, np.ndarray] = field(default_factory=dict)
    const_nodes: set[int] = field(default_factory=set)
    """Indexes of nodes that are computed at compile time."""
    shapes: dict[str, tuple[int | None, ...]] = field(default_factory=dict)
    dtypes: dict[str, int] = field(default_factory=dict)
    producer: dict[str, int] = field(default_factory=dict)
    consumers: dict[str, list[int]] = field(default_factory=dict)
    graph_inputs: list[str] = field(default_factory=list)
    graph_outputs: list[str] = field(default_factory=list)
    opset: int = 0
    depth: int = 0
    """How deep this graph is nested in control-flow bodies (0: the main graph)."""
    body_cache: dict[int, Any] = field(default_factory=dict, repr=False)

    @property
    def nodes(self) -> Sequence[onnx.NodeProto]:
        return self.model.graph.node

    def is_const(self, tensor: str) -> bool:
        return tensor == "" or tensor in self.const_tensors

    def value(self, tensor: str) -> np.ndarray | None:
        return self.values.get(tensor)

    def shape(self, tensor: str) -> tuple[int | None, ...] | None:
        return self.shapes.get(tensor)

    def static_shape(self, tensor: str) -> tuple[int, ...] | None:
        shape = self.shapes.get(tensor)
        if shape is None or any(d is None for d in shape):
            return None
        return tuple(int(d) for d in shape if d is not None)

    def rank(self, tensor: str) -> int | None:
        shape = self.shapes.get(tensor)
        return None if shape is None else len(shape)

    def numel(self, tensor: str) -> int | None:
        shape = self.static_shape(tensor)
        if shape is None:
            return None
        n = 1
        for d in shape:
            n *= d
        return n

    def nbytes(self, tensor: str, elem_bytes: int | None = None) -> int:
        """Bytes of the tensor (0 when its shape is unknown); `elem_bytes` overrides the element size."""
        n = self.numel(tensor)
        if n is None:
            return 0
        size = elem_bytes if elem_bytes is not None else DTYPE_BYTES.get(self.dtypes.get(tensor, 1), 4)
        return n * size

    def runtime_nodes(self) -> list[int]:
        """Indexes of the nodes that run at inference time, in graph order."""
        return [i for i in range(len(self.nodes)) if i not in self.const_nodes]


def load(path: Path | str) -> onnx.ModelProto:
    import onnx

    return onnx.load(str(path))


LIGHT_KEEP_BYTES = 16 * MATERIALIZE_LIMIT
"""Initializers larger than this are read without their data by `load_light` (serialized size), and
shape inference here sees them so too (data size, from their dims): no tensor analyse evaluates is
that large (MATERIALIZE_LIMIT elements of at most 8 bytes), and shapes never depend on a weight's values."""


def load_light(path: Path | str) -> onnx.ModelProto:
    """The model without the data of its initializers larger than LIGHT_KEEP_BYTES (names, types and
    dims stay): everything `analyse` and the graph readers need, without a copy of the weights."""
    import os

    import onnx

    from backends.passes.skim import skim

    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size <= LIGHT_KEEP_BYTES:  # nothing to leave out: onnx's C++ parse is the quicker read
            return onnx.ModelProto.FromString(fh.read())
        return onnx.ModelProto.FromString(skim(fh, size, LIGHT_KEEP_BYTES))


def opset_of(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 0


def analyse(model: onnx.ModelProto, *, materialize_limit: int = MATERIALIZE_LIMIT, depth: int = 0) -> Facts:
    """Facts about `model` (not modified). Folds constant subgraphs to a fixed point, then infers shapes."""
    from onnx import numpy_helper

    graph = model.graph
    facts = Facts(model=model, names=node_names(graph.node), opset=opset_of(model), depth=depth)
    for i, node in enumerate(graph.node):
        for out in node.output:
            if out:
                facts.producer[out] = i
        for inp in node.input:
            if inp:
                facts.consumers.setdefault(inp, []).append(i)
    init_names = {t.name for t in graph.initializer}
    facts.graph_inputs = [v.name for v in graph.input if v.name not in init_names]
    facts.graph_outputs = [v.name for v in graph.output]
    for init in graph.initializer:
        facts.const_tensors.add(init.name)
        facts.dtypes[init.name] = init.data_type
        facts.shapes[init.name] = tuple(int(d) for d in init.dims)
        if _numel(init.dims) <= materialize_limit:
            facts.values[init.name] = numpy_helper.to_array(init)
    for vi in graph.input:
        _record_value_info(facts, vi)

    evaluated: set[int] = set()
    stale = True
    for _ in range(8):
        _infer_shapes(facts)
        stale = _fold_pass(facts, evaluated, materialize_limit)
        if not stale:
            break
    if stale:
        _infer_shapes(facts)
    return facts


def _numel(dims: Iterable[int]) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def _record_value_info(facts: Facts, vi: onnx.ValueInfoProto) -> None:
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        return
    if tt.elem_type:
        facts.dtypes.setdefault(vi.name, tt.elem_type)
    if tt.HasField("shape"):
        dims: list[int | None] = []
        for d in tt.shape.dim:
            dims.append(int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else None)
        old = facts.shapes.get(vi.name)
        if old is None or (None in old and None not in dims):
            facts.shapes[vi.name] = tuple(dims)


def _fold_pass(facts: Facts, evaluated: set[int], limit: int) -> bool:
    """Evaluates every newly foldable node in graph order; True when something new became constant."""
    progress = False
    for i, node in enumerate(facts.nodes):
        if i in facts.const_nodes or node.op_type in _NONDETERMINISTIC or node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type in ("Shape", "Size"):
            if facts.static_shape(node.input[0]) is None:
                continue
        elif not all(facts.is_const(t) for t in node.input) or _has_subgraph(node):
            continue
        facts.const_nodes.add(i)
        progress = True
        for out in node.output:
            if out:
                facts.const_tensors.add(out)
        if i in evaluated:
            continue
        evaluated.add(i)
        outputs = _evaluate(node, facts, limit)
        if outputs is None:
            continue
        for name, value in zip(node.output, outputs, strict=False):
            if name and value is not None and value.size <= limit:
                facts.values[name] = value
                facts.shapes[name] = tuple(int(d) for d in value.shape)
                facts.dtypes[name] = _onnx_dtype(value)
    return progress


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (5, 10) for a in node.attribute)  # GRAPH, GRAPHS


def _onnx_dtype(value: np.ndarray) -> int:
    from onnx import helper

    return int(helper.np_dtype_to_tensor_dtype(value.dtype))


def _evaluate(node: onnx.NodeProto, facts: Facts, limit: int) -> list[np.ndarray | None] | None:
    """Evaluates one constant node; None when an input value is unknown or the result would be too large."""
    import numpy as np
    from onnx import helper, numpy_helper

    if node.op_type == "Shape":
        shape = facts.static_shape(node.input[0]) or ()
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        start, end = attrs.get("start", 0), attrs.get("end", len(shape))
        return [np.array(shape[start:end], dtype=np.int64)]
    if node.op_type == "Size":
        return [np.array(facts.numel(node.input[0]) or 0, dtype=np.int64)]
    if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
        return [numpy_helper.to_array(node.attribute[0].t)]
    inputs: list[Any] = []
    for name in node.input:
        if name == "":
            inputs.append(None)
            continue
        value = facts.values.get(name)
        if value is None:
            return None
        inputs.append(value)
    if node.op_type in ("ConstantOfShape", "Expand", "Tile") and _predicted_size(node, inputs) > limit:
        return None
    return _reference_run(node, inputs, facts.opset)


def _predicted_size(node: onnx.NodeProto, inputs: list[Any]) -> int:
    import numpy as np

    if node.op_type == "ConstantOfShape":
        return int(np.prod(inputs[0])) if inputs[0] is not None else 0
    if node.op_type == "Expand":
        return int(np.prod(np.broadcast_shapes(inputs[0].shape, tuple(int(d) for d in inputs[1]))))
    return int(inputs[0].size * np.prod(inputs[1]))


def _reference_run(node: onnx.NodeProto, inputs: list[Any], opset: int) -> list[np.ndarray | None] | None:
    from onnx.reference import ReferenceEvaluator

    feeds = {name: value for name, value in zip(node.input, inputs, strict=False) if name}
    try:
        opsets = {"": opset} if opset else None
        evaluator = ReferenceEvaluator(node, opsets=opsets)
        outputs = evaluator.run(None, feeds)
    except Exception:
        return None
    return list(outputs)


def _infer_shapes(facts: Facts) -> None:
    """Runs ONNX shape inference on a copy whose folded tensors are initializers; records every shape.
    The copy holds the graph and what inference reads of the model (IR version, opsets, functions),
    and its large initializers without data (_shape_only): a 1 GB model is not copied, nor serialized
    for onnx's C++ inference and parsed back."""
    import onnx
    from onnx import numpy_helper

    model = facts.model
    copy = onnx.ModelProto(ir_version=model.ir_version)
    copy.opset_import.extend(model.opset_import)
    copy.functions.extend(model.functions)
    graph = copy.graph
    graph.name = model.graph.name
    graph.input.extend(model.graph.input)
    graph.output.extend(model.graph.output)
    existing = {t.name for t in model.graph.initializer}
    graph.initializer.extend(_shape_only(t) for t in model.graph.initializer)
    needed: set[str] = set()
    kept = []
    for i, node in enumerate(model.graph.node):
        if i in facts.const_nodes and all(o in facts.values for o in node.output if o):
            continue
        kept.append(node)
        needed.update(node.input)
    needed.update(facts.graph_outputs)
    for name in sorted(needed):
        if name in facts.values and name not in existing:
            graph.initializer.append(numpy_helper.from_array(facts.values[name], name))
    graph.node.extend(kept)
    try:
        inferred = onnx.shape_inference.infer_shapes(copy, data_prop=True)
    except Exception:
        return
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input):
        _record_value_info(facts, vi)


def _shape_only(tensor: onnx.TensorProto) -> onnx.TensorProto:
    """`tensor` itself, or when its data is larger than LIGHT_KEEP_BYTES its name, type and dims alone,
    as `load_light` reads it. Sized from its dims: ByteSize() (like reading raw_data) would serialize
    (copy) the tensor."""
    import onnx

    if _numel(tensor.dims) * DTYPE_BYTES.get(tensor.data_type, 1) <= LIGHT_KEEP_BYTES:
        return tensor
    return onnx.TensorProto(name=tensor.name, dims=tensor.dims, data_type=tensor.data_type)
