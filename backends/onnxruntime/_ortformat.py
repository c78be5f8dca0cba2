"""Canonical bytes for ORT-format (.ort) models.

ONNX Runtime serializes its kernel-type-string resolver by iterating an absl hash map whose order
depends on heap addresses, so two saves of the same graph differ in the first few kB (measured with
ORT 1.32: same size, ~1100 bytes differ; with ASLR disabled the order still moves with the size of the
environment). The content is a set keyed by `op_id` (the schema marks it `(key)`), so sorting it loses
nothing. This module reads the flatbuffer into plain values with the schema below (from
onnxruntime/core/flatbuffers/schema/ort.fbs), sorts the resolver and the name-keyed lists, and writes
it back with a deterministic builder. A field this schema does not know makes it refuse (UnknownField)
rather than drop data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

FILE_IDENTIFIER = b"ORTM"

Schema = dict[str, list[tuple[str, str | None]]]

# Field types: a scalar name, "string", "[<scalar>]", "[string]", a table name, "[<table>]",
# "[<struct>]", or "union:<name>" (two slots: type, value). None marks a deprecated slot.
TABLES: Schema = {
    "Shape": [("dim", "[Dimension]")],
    "Dimension": [("value", "DimensionValue"), ("denotation", "string")],
    "DimensionValue": [("dim_type", "int8"), ("dim_value", "int64"), ("dim_param", "string")],
    "TensorTypeAndShape": [("elem_type", "int32"), ("shape", "Shape")],
    "MapType": [("key_type", "int32"), ("value_type", "TypeInfo")],
    "SequenceType": [("elem_type", "TypeInfo")],
    "NodeEdge": [("node_index", "uint32"), ("input_edges", "[EdgeEnd]"), ("output_edges", "[EdgeEnd]")],
    "Node": [
        ("name", "string"),
        ("doc_string", "string"),
        ("domain", "string"),
        ("since_version", "int32"),
        ("index", "uint32"),
        ("op_type", "string"),
        ("type", "int32"),
        ("execution_provider_type", "string"),
        ("inputs", "[string]"),
        ("outputs", "[string]"),
        ("attributes", "[Attribute]"),
        ("input_arg_counts", "[int32]"),
        ("implicit_inputs", "[string]"),
    ],
    "ValueInfo": [("name", "string"), ("doc_string", "string"), ("type", "TypeInfo")],
    "TypeInfo": [("denotation", "string"), ("value", "union:TypeInfoValue")],
    "OperatorSetId": [("domain", "string"), ("version", "int64")],
    "Tensor": [
        ("name", "string"),
        ("doc_string", "string"),
        ("dims", "[int64]"),
        ("data_type", "int32"),
        ("raw_data", "[uint8]"),
        ("string_data", "[string]"),
        ("external_data_offset", "int64"),  # ORT >= 1.20; default -1 (absent fields stay absent)
    ],
    "SparseTensor": [("values", "Tensor"), ("indices", "Tensor"), ("dims", "[int64]")],
    "Attribute": [
        ("name", "string"),
        ("doc_string", "string"),
        ("type", "int32"),
        ("f", "float32"),
        ("i", "int64"),
        ("s", "string"),
        ("t", "Tensor"),
        ("g", "Graph"),
        ("floats", "[float32]"),
        ("ints", "[int64]"),
        ("strings", "[string]"),
        ("tensors", "[Tensor]"),
        ("graphs", "[Graph]"),
    ],
    "NodesToOptimizeIndices": [
        ("node_indices", "[uint32]"),
        ("num_inputs", "uint32"),
        ("num_outputs", "uint32"),
        ("has_variadic_input", "bool"),
        ("has_variadic_output", "bool"),
        ("num_variadic_inputs", "uint32"),
        ("num_variadic_outputs", "uint32"),
    ],
    "RuntimeOptimizationRecord": [
        ("action_id", "string"),
        ("nodes_to_optimize_indices", "NodesToOptimizeIndices"),
        ("produced_nodes", None),
        ("produced_op_ids", "[string]"),
    ],
    "RuntimeOptimizationRecordContainerEntry": [
        ("optimizer_name", "string"),
        ("runtime_optimization_records", "[RuntimeOptimizationRecord]"),
    ],
    "RuntimeOptimizations": [("records", "[RuntimeOptimizationRecordContainerEntry]")],
    "Graph": [
        ("initializers", "[Tensor]"),
        ("node_args", "[ValueInfo]"),
        ("nodes", "[Node]"),
        ("max_node_index", "uint32"),
        ("node_edges", "[NodeEdge]"),
        ("inputs", "[string]"),
        ("outputs", "[string]"),
        ("sparse_initializers", "[SparseTensor]"),
        ("runtime_optimizations", "RuntimeOptimizations"),
    ],
    "StringStringEntry": [("key", "string"), ("value", "string")],
    "Model": [
        ("ir_version", "int64"),
        ("opset_import", "[OperatorSetId]"),
        ("producer_name", "string"),
        ("producer_version", "string"),
        ("domain", "string"),
        ("model_version", "int64"),
        ("doc_string", "string"),
        ("graph", "Graph"),
        ("graph_doc_string", "string"),
        ("metadata_props", "[StringStringEntry]"),
    ],
    "ArgTypeAndIndex": [("arg_type", "int8"), ("index", "uint32")],
    "KernelTypeStrArgsEntry": [("kernel_type_str", "string"), ("args", "[ArgTypeAndIndex]")],
    "OpIdKernelTypeStrArgsEntry": [("op_id", "string"), ("kernel_type_str_args", "[KernelTypeStrArgsEntry]")],
    "KernelTypeStrResolver": [("op_kernel_type_str_args", "[OpIdKernelTypeStrArgsEntry]")],
    "InferenceSession": [
        ("ort_version", "string"),
        ("model", "Model"),
        ("session_state", None),
        ("kernel_type_str_resolver", "KernelTypeStrResolver"),
    ],
}
STRUCTS: dict[str, list[tuple[str, str]]] = {
    "EdgeEnd": [("node_index", "uint32"), ("src_arg_index", "int32"), ("dst_arg_index", "int32")],
}
UNIONS: dict[str, dict[int, str]] = {
    "TypeInfoValue": {1: "TensorTypeAndShape", 2: "SequenceType", 3: "MapType"}
}

# Floats are carried as their bit patterns, so values round-trip exactly (NaN included).
_SCALARS: dict[str, tuple[str, str, int]] = {
    # name: (flatbuffers number_types flags, struct-free numpy dtype, byte width)
    "bool": ("BoolFlags", "<u1", 1),
    "int8": ("Int8Flags", "<i1", 1),
    "uint8": ("Uint8Flags", "<u1", 1),
    "int16": ("Int16Flags", "<i2", 2),
    "uint16": ("Uint16Flags", "<u2", 2),
    "int32": ("Int32Flags", "<i4", 4),
    "uint32": ("Uint32Flags", "<u4", 4),
    "int64": ("Int64Flags", "<i8", 8),
    "uint64": ("Uint64Flags", "<u8", 8),
    "float32": ("Uint32Flags", "<u4", 4),
    "float64": ("Uint64Flags", "<u8", 8),
}
_PREPEND_SLOT = {
    "bool": "PrependBoolSlot",
    "int8": "PrependInt8Slot",
    "uint8": "PrependUint8Slot",
    "int16": "PrependInt16Slot",
    "uint16": "PrependUint16Slot",
    "int32": "PrependInt32Slot",
    "uint32": "PrependUint32Slot",
    "int64": "PrependInt64Slot",
    "uint64": "PrependUint64Slot",
    "float32": "PrependUint32Slot",
    "float64": "PrependUint64Slot",
}


class UnknownField(ValueError):
    """The file has a field this schema does not describe (a newer ORT): canonicalizing would drop it."""


def _slots(table: str) -> int:
    return sum(2 if (t or "").startswith("union:") else 1 for _, t in TABLES[table])


# ---------------------------------------------------------------------------------------------- read


def _flags(scalar: str) -> Any:
    from flatbuffers import number_types

    return getattr(number_types, _SCALARS[scalar][0])


Only = dict[str, frozenset[str]]
"""Per table, the fields to read (a table not named is read whole): a reader that needs a few fields
of a large file skips the rest unread."""


def read(buf: bytes | memoryview, only: Only | None = None) -> dict[str, Any]:
    """The InferenceSession as nested dicts (absent fields absent; strings and scalar vectors as bytes);
    with `only`, just those fields of the tables it names."""
    from flatbuffers import encode, number_types

    if len(buf) < 8 or buf[4:8] != FILE_IDENTIFIER:
        raise ValueError("not an ORT-format model (no ORTM identifier)")
    root = encode.Get(number_types.UOffsetTFlags.packer_type, buf, 0)
    return _read_table(buf, root, "InferenceSession", only or {})


def _read_table(buf: bytes | memoryview, pos: int, name: str, only: Only) -> dict[str, Any]:
    from flatbuffers import number_types, table

    tab = table.Table(buf, pos)
    vtable = tab.Pos - tab.Get(number_types.SOffsetTFlags, tab.Pos)
    present = (tab.Get(number_types.VOffsetTFlags, vtable) - 4) // 2
    known = _slots(name)
    if any(tab.Offset(4 + 2 * s) for s in range(known, present)):
        raise UnknownField(f"{name} has fields beyond the {known} this schema knows")
    fields: dict[str, Any] = {}
    wanted = only.get(name)
    slot = 0
    for field, kind in TABLES[name]:
        if kind is not None and kind.startswith("union:"):
            type_off, value_off = tab.Offset(4 + 2 * slot), tab.Offset(6 + 2 * slot)
            slot += 2
            if value_off and (wanted is None or field in wanted):
                utype = tab.Get(_flags("uint8"), tab.Pos + type_off) if type_off else 0
                member = UNIONS[kind[6:]].get(utype)
                if member is None:
                    raise UnknownField(f"{name}.{field} has union type {utype}")
                fields[field] = (utype, _read_table(buf, tab.Indirect(tab.Pos + value_off), member, only))
            continue
        off = tab.Offset(4 + 2 * slot)
        slot += 1
        if not off:
            continue
        if kind is None:
            raise UnknownField(f"{name}.{field} is deprecated but present")
        if wanted is None or field in wanted:
            fields[field] = _read_value(buf, tab, off, kind, only)
    return fields


def _read_value(buf: bytes | memoryview, tab: Any, off: int, kind: str, only: Only) -> Any:
    if kind in _SCALARS:
        return tab.Get(_flags(kind), tab.Pos + off)
    if kind == "string":
        return bytes(tab.String(tab.Pos + off))
    if kind in TABLES:
        return _read_table(buf, tab.Indirect(tab.Pos + off), kind, only)
    element = kind[1:-1]
    start, length = tab.Vector(off), tab.VectorLen(off)
    if element in _SCALARS:  # a view, not a copy: a 300 MB initializer is held once
        width = _SCALARS[element][2]
        return memoryview(tab.Bytes)[start : start + width * length]
    if element == "string":
        return [bytes(tab.String(start + 4 * i)) for i in range(length)]
    if element in TABLES:
        return [_read_table(buf, tab.Indirect(start + 4 * i), element, only) for i in range(length)]
    if element in STRUCTS:
        return [_read_struct(tab, start + i * _struct_size(element), element) for i in range(length)]
    raise ValueError(f"schema type {kind!r} unknown")


def _struct_size(name: str) -> int:
    return sum(_SCALARS[kind][2] for _, kind in STRUCTS[name])


def _read_struct(tab: Any, pos: int, name: str) -> tuple[int, ...]:
    values, offset = [], 0
    for _, kind in STRUCTS[name]:
        values.append(tab.Get(_flags(kind), pos + offset))
        offset += _SCALARS[kind][2]
    return tuple(values)


# --------------------------------------------------------------------------------------------- write


def write(session: dict[str, Any], size_hint: int = 1 << 20) -> memoryview:
    """Serializes an InferenceSession dict; the same dict always gives the same bytes. `size_hint`
    (the source file's size) sizes the builder once: doubling would hold two buffers at each step.
    The bytes are a view of the builder's buffer: a copy would be one more model-sized buffer."""
    import flatbuffers

    builder = flatbuffers.Builder(size_hint + size_hint // 8 + (1 << 20))
    builder.ForceDefaults(True)  # a field present in the input stays present, even at its default
    root = _write_table(builder, "InferenceSession", session)
    builder.Finish(root, file_identifier=FILE_IDENTIFIER)
    return memoryview(builder.Bytes)[builder.Head() :]  # no copy (Output() makes two)


def _end_vector(builder: Any, length: int) -> int:
    try:
        return int(builder.EndVector())
    except TypeError:  # flatbuffers < 2.0 takes the length
        return int(builder.EndVector(length))


def _offset_vector(builder: Any, offsets: list[int]) -> int:
    builder.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        builder.PrependUOffsetTRelative(off)
    return _end_vector(builder, len(offsets))


def _string(builder: Any, value: bytes) -> int:
    """Equal strings are written once (tensor names recur in nodes, edges and node args)."""
    create = getattr(builder, "CreateSharedString", builder.CreateString)
    return int(create(value))


def _write_value(builder: Any, kind: str, value: Any) -> int:
    import numpy as np

    if kind == "string":
        return _string(builder, value)
    if kind in TABLES:
        return _write_table(builder, kind, value)
    element = kind[1:-1]
    if element in _SCALARS:
        return _scalar_vector(builder, value, np.dtype(_SCALARS[element][1]))
    if element == "string":
        return _offset_vector(builder, [_string(builder, s) for s in value])
    if element in TABLES:
        return _offset_vector(builder, [_write_table(builder, element, t) for t in value])
    if element in STRUCTS:
        return _struct_vector(builder, element, value)
    raise ValueError(f"schema type {kind!r} unknown")


def _scalar_vector(builder: Any, value: Any, dtype: Any) -> int:
    """CreateNumpyVector without its `tobytes()` copy: the little-endian bytes as read, in place."""
    data = memoryview(value).cast("B")
    builder.StartVector(dtype.itemsize, len(data) // dtype.itemsize, dtype.alignment)
    builder.head = builder.Head() - len(data)
    with memoryview(builder.Bytes) as target:  # bytearray slice assignment would copy `data` first
        target[builder.Head() : builder.Head() + len(data)] = data
    builder.vectorNumElems = len(data) // dtype.itemsize
    return _end_vector(builder, len(data) // dtype.itemsize)


def _struct_vector(builder: Any, name: str, items: list[tuple[int, ...]]) -> int:
    size = _struct_size(name)
    align = max(_SCALARS[kind][2] for _, kind in STRUCTS[name])
    builder.StartVector(size, len(items), align)
    prepend: dict[str, Callable[[int], None]] = {
        "uint32": builder.PrependUint32,
        "int32": builder.PrependInt32,
        "uint8": builder.PrependUint8,
        "int8": builder.PrependInt8,
        "uint16": builder.PrependUint16,
        "int16": builder.PrependInt16,
        "uint64": builder.PrependUint64,
        "int64": builder.PrependInt64,
    }
    for item in reversed(items):
        builder.Prep(align, size)
        for (_, kind), value in reversed(list(zip(STRUCTS[name], item, strict=True))):
            prepend[kind](value)
    return _end_vector(builder, len(items))


def _write_table(builder: Any, name: str, fields: dict[str, Any]) -> int:
    scalars: list[tuple[int, str, Any]] = []
    offsets: list[tuple[int, int]] = []
    slot = 0
    for field, kind in TABLES[name]:
        width = 2 if (kind or "").startswith("union:") else 1
        if field in fields and kind is not None:
            value = fields[field]
            if kind.startswith("union:"):
                utype, member = value
                scalars.append((slot, "uint8", utype))
                offsets.append((slot + 1, _write_table(builder, UNIONS[kind[6:]][utype], member)))
            elif kind in _SCALARS:
                scalars.append((slot, kind, value))
            else:
                offsets.append((slot, _write_value(builder, kind, value)))
        slot += width
    builder.StartObject(slot)
    for s, off in offsets:
        builder.PrependUOffsetTRelativeSlot(s, off, 0)
    for s, kind, value in scalars:
        getattr(builder, _PREPEND_SLOT[kind])(s, value, 0)
    return int(builder.EndObject())


# ----------------------------------------------------------------------------------------- canonical


def _sort_graph(graph: dict[str, Any]) -> None:
    for key in ("initializers", "node_args"):
        if key in graph:
            graph[key] = sorted(graph[key], key=lambda item: item.get("name", b""))
    records = graph.get("runtime_optimizations", {}).get("records")
    if records is not None:
        records.sort(key=lambda r: r.get("optimizer_name", b""))
    for node in graph.get("nodes", []):
        for attr in node.get("attributes", []):
            if "g" in attr:
                _sort_graph(attr["g"])
            for sub in attr.get("graphs", []):
                _sort_graph(sub)


def canonical(session: dict[str, Any]) -> dict[str, Any]:
    """Sorts what is a set in ORT's reader: the kernel-type-string resolver (by op id, then type
    string), initializers and node args (by name), runtime optimization records (by optimizer)."""
    resolver = session.get("kernel_type_str_resolver")
    if resolver is not None and "op_kernel_type_str_args" in resolver:
        entries = sorted(resolver["op_kernel_type_str_args"], key=lambda e: e.get("op_id", b""))
        for entry in entries:
            if "kernel_type_str_args" in entry:
                entry["kernel_type_str_args"].sort(key=lambda e: e.get("kernel_type_str", b""))
        resolver["op_kernel_type_str_args"] = entries
    graph = session.get("model", {}).get("graph")
    if graph is not None:
        _sort_graph(graph)
    return session


def canonical_bytes(buf: bytes) -> memoryview:
    """The canonical serialization of an .ort file; verified to read back to the same content."""
    content = canonical(read(buf))
    out = write(content, len(buf))
    if canonical(read(out)) != content:
        raise ValueError("canonical .ort does not read back to the same content")
    return out
