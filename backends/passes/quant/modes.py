"""The quantize stage's fp16 and qat modes, and the fp16 conversion of layers ptq keeps in float."""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.catalog import Target
from backends.passes import data
from backends.passes.quant.policy import COMPUTE_OPS, Policy, has_float
from backends.passes.quantized import QDQ_OPS
from backends.sdk.errors import TerminalError, one_line

if TYPE_CHECKING:
    import onnx

Logger = Callable[[str], None]


def save_deterministic(model: onnx.ModelProto, path: Path) -> None:
    path.write_bytes(model.SerializeToString(deterministic=True))


def keep_fp16(built: Path, nodes: Sequence[str], target: Target) -> tuple[Path, str]:
    """Converts the kept (excluded) nodes of a QDQ model to fp16 when the target computes fp16 and the
    result still runs; otherwise they stay fp32, and the returned note says why."""
    if "fp16" not in target.precisions:
        return built, f"keep fp16: target {target.id} has no fp16; kept nodes stay fp32"
    if target.npu_cores == 0:
        return built, (
            f"keep fp16: target {target.id} runs the model on the CPU, where ONNX Runtime computes fp16 "
            "through fp32 casts; kept nodes stay fp32"
        )
    import onnx

    try:
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = onnx.load(str(built))
        others = [n.name for n in model.graph.node if n.name not in set(nodes)]
        converted = convert_float_to_float16(model, keep_io_types=True, node_block_list=others)
        out = built.with_name(built.stem + "-fp16.onnx")
        save_deterministic(converted, out)
        _smoke_run(out)
    except Exception as exc:  # noqa: BLE001 - converter and ORT raise various types
        return built, f"keep fp16: conversion not feasible ({one_line(exc)}); kept nodes stay fp32"
    return out, f"keep fp16: {len(nodes)} kept nodes converted to fp16"


def _smoke_run(model: Path) -> None:
    """Loads and runs the model once on random data: a converted model must at least execute."""
    from backends.passes import accuracy

    inputs = data.model_inputs(model)
    accuracy.run_model(model, [data.random_feed(inputs, 0, 0)])


# ------------------------------------------------------------------------------------------------ fp16


def convert_fp16(source: Path, out: Path, policy: Policy, target: Target, log: Logger) -> dict[str, Any]:
    """The whole model in fp16; I/O stays float32 when `keep_io_types` (the default)."""
    import onnx

    from backends.passes.importer import raise_opset

    if "fp16" not in target.precisions:
        raise TerminalError(
            f"quantization.mode fp16: target {target.id} has no fp16 (its precisions: {', '.join(target.precisions)})"
        )
    try:
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = raise_opset(onnx.load(str(source)), log)
        converted = convert_float_to_float16(model, keep_io_types=policy.keep_io_types)
    except TerminalError:
        raise
    except Exception as exc:  # noqa: BLE001 - the converter raises various types
        raise TerminalError(f"fp16 conversion failed: {one_line(exc)}") from exc
    save_deterministic(converted, out)
    report: dict[str, Any] = {"mode": "fp16", "keep_io_types": policy.keep_io_types}
    try:
        _smoke_run(out)
        report["runs_on_host"] = True
    except TerminalError as exc:
        report["runs_on_host"] = False
        report["notes"] = [f"the fp16 model does not run on the host ONNX Runtime: {exc}"]
    io = [
        {"name": v.name, "type": onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type).lower()}
        for v in (*converted.graph.input, *converted.graph.output)
    ]
    report["io"] = io
    return report


# ------------------------------------------------------------------------------------------------- qat


def validate_qat(source: Path, out: Path, target: Target, log: Logger) -> dict[str, Any]:
    """Accepts a model that already carries QDQ nodes; reports every compute op left in float.

    A compute op is quantized when its activation and weight inputs come from DequantizeLinear. Ops left
    in float are a TerminalError on a target without float support, otherwise warnings."""
    import onnx

    model = onnx.load(str(source))
    nodes = list(model.graph.node)
    if not any(n.op_type in QDQ_OPS for n in nodes):
        raise TerminalError("quantization.mode qat: the model has no QuantizeLinear/DequantizeLinear nodes")
    producer = {o: n for n in nodes for o in n.output}
    float_ops = []
    for node in nodes:
        if node.op_type not in COMPUTE_OPS:
            continue
        operands = [t for t in node.input[:2] if t]
        if not all(
            producer.get(t) is not None and producer[t].op_type == "DequantizeLinear" for t in operands
        ):
            float_ops.append({"node": node.name, "op_type": node.op_type})
    types = _qdq_types(model)
    unsupported = sorted(t for t in types if t not in target.precisions)
    if unsupported:
        raise TerminalError(
            f"quantization.mode qat: the model uses {', '.join(unsupported)}, which target {target.id} does not "
            f"support (its precisions: {', '.join(target.precisions)})"
        )
    compute = sum(1 for n in nodes if n.op_type in COMPUTE_OPS)
    if float_ops and not has_float(target):
        shown = ", ".join(f"{o['node']} ({o['op_type']})" for o in float_ops[:5])
        more = f" and {len(float_ops) - 5} more" if len(float_ops) > 5 else ""
        raise TerminalError(
            f"quantization.mode qat: target {target.id} runs no float layers, but {len(float_ops)} of {compute} "
            f"compute ops are not quantized: {shown}{more}"
        )
    shutil.copyfile(source, out)
    report: dict[str, Any] = {
        "mode": "qat",
        "compute_ops": compute,
        "float_compute_ops": float_ops,
        "quantized_types": sorted(types),
        "qdq_nodes": dict(sorted(Counter(n.op_type for n in nodes if n.op_type in QDQ_OPS).items())),
    }
    if float_ops:
        report["warnings"] = [
            f"{len(float_ops)} of {compute} compute ops are left in float (see float_compute_ops)"
        ]
        log(report["warnings"][0])
    return report


def _qdq_types(model: onnx.ModelProto) -> set[str]:
    """Integer types carried by the model's Q/DQ nodes (from zero points or quantized initializers)."""
    import onnx

    names = {
        onnx.TensorProto.INT8: "int8",
        onnx.TensorProto.UINT8: "uint8",
        onnx.TensorProto.INT16: "int16",
        onnx.TensorProto.UINT16: "uint16",
        onnx.TensorProto.INT4: "int4",
        onnx.TensorProto.UINT4: "uint4",
    }
    inits = {t.name: t.data_type for t in model.graph.initializer}
    found: set[str] = set()
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear":
            for t in (node.input[2] if len(node.input) > 2 else "", node.input[0]):
                if t in inits and inits[t] in names:
                    found.add(names[inits[t]])
                    break
        elif node.op_type == "QuantizeLinear" and len(node.input) > 2 and node.input[2] in inits:
            dtype = inits[node.input[2]]
            if dtype in names:
                found.add(names[dtype])
    return found
