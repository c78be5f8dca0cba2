"""OpenVINO's per-layer counters (PERF_COUNT) mapped back to the ONNX nodes of the deployed model.

OpenVINO keeps an ONNX node's name (or its output tensor's) as the friendly name of the layer made
from it; a fused layer keeps the name of the last node it absorbed, and the names of the others are
lost, so a layer is tied to the ONNX node it is named after and the counters of fused-away nodes are
in that layer's time. The kernel name (exec_type) says what really ran: "brgconv_avx512_I8" is an int8
convolution, "jit_avx512_FP32" float.
"""

from __future__ import annotations

import re
from typing import Any

import onnx

_PRECISION = re.compile(r"(?:^|_)(I8|U8|I4|U4|FP32|F32|FP16|F16|BF16|I32|I64|U1)$", re.IGNORECASE)
_NAMES = {"i8": "int8", "u8": "int8", "i4": "int4", "u4": "int4", "fp32": "fp32", "f32": "fp32"}
_NAMES |= {"fp16": "fp16", "f16": "fp16", "bf16": "bf16", "i32": "int32", "i64": "int64", "u1": "bool"}


def executed_precision(exec_type: str) -> str | None:
    """The precision in a CPU-plugin kernel name ("jit_avx512_I8" -> int8); None when it names none."""
    found = _PRECISION.search(exec_type or "")
    return _NAMES.get(found.group(1).lower()) if found else None


def runtime_layers(trace: dict[str, Any], model: onnx.ModelProto, device: str) -> list[dict[str, Any]]:
    """benchprog's OpenVINO layers with the ONNX node each is named after and what it ran in."""
    names = {n.name for n in model.graph.node}
    producer = {t: n.name for n in model.graph.node for t in n.output if t}
    layers = []
    for layer in trace.get("layers") or []:
        name = str(layer["name"])
        node = name if name in names else producer.get(name)
        layers.append(
            {
                "name": name,
                "op_type": layer.get("op_type"),
                "onnx_nodes": [node] if node else [],
                "inserted": node is None,
                "device": "NPU" if device.upper().startswith("NPU") else "CPU",
                "executed_by": f"openvino:{device} {layer.get('exec_type')}",
                "exec_type": layer.get("exec_type"),
                "precision": executed_precision(str(layer.get("exec_type") or "")),
                "time_ms": round(float(layer["time_us"]) / 1e3, 6),
                "cpu_time_ms": round(float(layer.get("cpu_time_us") or 0.0) / 1e3, 6),
            }
        )
    return layers
