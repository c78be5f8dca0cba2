"""Runs inside the managed tflite venv: `python -I operators.py REQUEST.json RESULT.json`.

Standalone (standard library and LiteRT's own flatbuffer schema, without importing TensorFlow). Lists a .tflite's operators in
execution order, as the compiler that takes the file (ncc-tflite, vela) receives them: each one's
builtin name (or custom code), its output tensors' names and its input tensors' element types.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any


def operators(path: str) -> list[dict[str, Any]]:
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model(path)
    builtin = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    types = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}

    def name_of(code: Any) -> str:
        if code.customCode:
            custom = code.customCode
            return f"CUSTOM:{custom.decode() if isinstance(custom, bytes) else custom}"
        number = max(int(code.builtinCode), int(code.deprecatedBuiltinCode))
        return str(builtin.get(number, f"BUILTIN_{number}"))

    def tensor_name(graph: Any, index: int) -> str:
        raw = graph.tensors[index].name
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    out = []
    graph = model.subgraphs[0]
    for op in graph.operators:
        inputs = [int(i) for i in (op.inputs if op.inputs is not None else []) if int(i) >= 0]
        out.append(
            {
                "op": name_of(model.operatorCodes[op.opcodeIndex]),
                "outputs": [
                    tensor_name(graph, int(i)) for i in (op.outputs if op.outputs is not None else [])
                ],
                "input_types": sorted({str(types.get(graph.tensors[i].type, "?")) for i in inputs}),
            }
        )
    return out


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text())
    try:
        result: dict[str, Any] = {"ok": True, "operators": operators(request["tflite"])}
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        traceback.print_exc()
        lines = str(exc).strip().splitlines()
        result = {"ok": False, "error": (lines[0] if lines else type(exc).__name__)[:400]}
    Path(argv[1]).write_text(json.dumps(result, indent=1, sort_keys=True))
    return 0 if result["ok"] else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
