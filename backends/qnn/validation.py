"""QNN's own per-node verdicts, read from the EP's verbose log (log_severity_level=0).

The EP logs "Validation PASSED/FAILED for N nodes in OrtNodeUnit (Type) :" followed by one
"Operator type: T Node name: NAME Node index: I" line per node of the unit and, on failure, a
"REASON : ..." line; GetCapability may run more than once, the last verdict wins. The "Node
placements" block then lists the nodes ORT kept on the CPU EP (a validated node can still land there).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from backends.passes.quantized import QDQ_OPS

_UNIT = re.compile(r"Validation (PASSED|FAILED) for \d+ nodes in OrtNodeUnit \((\S+)\)")
_NODE = re.compile(r"^\s*Operator type: (\S+) Node name: (.*?) Node index: \d+\s*$")
_REASON = re.compile(r"^\s*REASON\s*:\s*(.*)$")
_PLACED = re.compile(r"Node\(s\) placed on \[(\w+)\]")
_ALL_PLACED = re.compile(r"All nodes placed on \[(\w+)\]")
_PLACED_NODE = re.compile(r"VerifyEachNodeIsAssignedToAnEp\]\s{2,}(\S+) \((.*)\)\s*$")


@dataclass(frozen=True)
class NodeVerdict:
    node: str
    op_type: str
    passed: bool
    reason: str = ""


@dataclass
class Validation:
    verdicts: dict[str, NodeVerdict]
    """node name -> QNN's last verdict."""
    cpu: set[str]
    """Nodes ORT placed on the CPU EP."""
    all_on_cpu: bool = False


def parse(log: str) -> Validation:
    verdicts: dict[str, NodeVerdict] = {}
    unit: list[str] = []
    passed = False
    cpu: set[str] = set()
    provider = ""
    all_on_cpu = False
    for line in log.splitlines():
        head = _UNIT.search(line)
        if head:
            unit, passed = [], head.group(1) == "PASSED"
            continue
        node = _NODE.match(line)
        if node:
            verdicts[node.group(2)] = NodeVerdict(node.group(2), node.group(1), passed)
            unit.append(node.group(2))
            continue
        reason = _REASON.match(line)
        if reason and unit:
            for name in unit:
                verdicts[name] = NodeVerdict(name, verdicts[name].op_type, False, reason.group(1).strip())
            continue
        every = _ALL_PLACED.search(line)
        if every:
            all_on_cpu, unit = every.group(1) == "CPUExecutionProvider", []
            continue
        placed = _PLACED.search(line)
        if placed:
            provider, unit = placed.group(1), []
            continue
        member = _PLACED_NODE.search(line)
        if member and provider == "CPUExecutionProvider":
            cpu.add(member.group(2))
    return Validation(verdicts, cpu, all_on_cpu)


def device_map(node_names: list[str], found: Validation) -> dict[str, str]:
    """ONNX node -> "NPU" when QNN validated it and ORT gave it to the QNN EP, else "CPU"."""
    out = {}
    for name in node_names:
        verdict = found.verdicts.get(name)
        on_npu = verdict is not None and verdict.passed and name not in found.cpu and not found.all_on_cpu
        out[name] = "NPU" if on_npu else "CPU"
    return out


def rejected(log: str) -> str:
    """The nodes QNN's own validation refused, as one clause ("Erf node 'odd' (reason); ..."), or ""
    when the log names none: a failed compile is reported at the nodes the toolchain would not take."""
    groups: dict[tuple[str, str], list[str]] = {}
    for v in parse(log).verdicts.values():
        if not v.passed:
            groups.setdefault((v.op_type, v.reason or ""), []).append(v.node)
    # the op that failed first, then the Q/DQ pairs refused with it (a consequence, not the cause)
    order = sorted(groups, key=lambda g: g[0] in QDQ_OPS)
    refused = [_refused(op, reason, groups[(op, reason)]) for op, reason in order]
    return "; ".join([*_not_added(log), *refused])


_NOT_ADDED = re.compile(r"graphAddNode\(\) failed for node `([^`]+)` of type `([^`]+)` with error code (\d+)")


def _not_added(log: str) -> list[str]:
    """Nodes the HTP refused while composing a graph that validation had passed ("QNN.graphAddNode()
    failed for node `expand_3_q` of type `Quantize` with error code 6007"): the compile's real stop."""
    seen: list[str] = []
    for found in _NOT_ADDED.finditer(log):
        text = f"graphAddNode refused QNN {found.group(2)} node {found.group(1)!r} (error {found.group(3)})"
        if text not in seen:
            seen.append(text)
    return seen


SHOWN_NODES = 3
"""Nodes named per refused op and reason: the line stays one line when a layer repeats (six
transformer blocks' LayerNormalization)."""


def _refused(op: str, reason: str, nodes: list[str]) -> str:
    why = f" ({reason})" if reason else ""
    if len(nodes) == 1:
        return f"{op} node {nodes[0]!r}{why}"
    shown = ", ".join(repr(n) for n in nodes[:SHOWN_NODES]) + (", ..." if len(nodes) > SHOWN_NODES else "")
    return f"{len(nodes)} {op} nodes ({shown}){why}"
