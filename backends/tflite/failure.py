"""Where onnx2tf stopped, read from its own log: a failed conversion names the ONNX node or op.

onnx2tf converts node by node; when a node's converter raises it prints "onnx_op_name: NAME" in its
error banner (the name after its sanitizing: ':' -> '__', a leading '/' -> 'wa/'), and for an op type
it has no converter for it prints "TYPE OP is not yet implemented."
"""

from __future__ import annotations

import re
from pathlib import Path

_NODE = re.compile(r"onnx_op_name: (\S+)")
_UNIMPLEMENTED = re.compile(r"(\w+) OP is not yet implemented")


def _sanitized(name: str) -> str:
    return re.sub("^/", "wa/", name.replace(":", "__"))


def stopped_at(log: str, model: Path) -> str:
    """The last stop onnx2tf's log names, as "<op> node '<name>'" (or "op <type> ... (nodes ...)"); ""
    when it names none. Node names and types are the ONNX model's own."""
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    nodes = list(graph.node)
    named = _NODE.findall(log)
    if named:
        name = named[-1]
        hit = next((n for n in nodes if name in (n.name, _sanitized(n.name))), None)
        return f"{hit.op_type} node {hit.name!r}" if hit is not None else f"node {name!r}"
    missing = _UNIMPLEMENTED.findall(log)
    if missing:
        op = missing[-1]
        of_type = [n.name or n.output[0] for n in nodes if n.op_type == op]
        shown = f" (nodes {', '.join(repr(n) for n in of_type[:5])})" if of_type else ""
        return f"op {op}, which onnx2tf has no converter for{shown}"
    return ""
