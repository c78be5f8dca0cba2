"""rknn-toolkit2's own account of a build: the "Network Layer Information Table" and the memory totals.

A verbose build prints, after its command-building pass, one row per layer of the compiled graph: the
layer's fused op type, its target (CPU or NPU), its cycles (DDR/NPU/Total, the toolkit's own cycle model
of one NPU core) and its full name `<ONNX op type>:<ONNX node name>[suffix]` (a large GlobalAveragePool
becomes `Conv:GlobalAveragePool@0_2conv0`, `..._2conv1`, ...; a fused Conv+Add `Conv:Conv@11_ConvAdd`).
After the memory pass it prints "Total Internal Memory Size" and "Total Weight Memory Size". This module
reads both from the build log, and maps layers back to the ONNX nodes they name: a layer names a node by
its full name, or by the node's name followed by a suffix the toolkit appends (`_`, `#`). ONNX nodes no
layer names were fused into a neighbouring layer or folded by the toolkit; they run where the nearest
named node in the graph runs.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backends.passes.facts import Facts

TOOL = "rknn-toolkit2"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TITLE = "Network Layer Information Table"
_ROW = re.compile(
    r"^(?P<id>\d+)\s+(?P<op>\S+)\s+(?P<dtype>\S+)\s+(?P<target>CPU|NPU)\s+(?P<ins>\S+)\s+(?P<outs>\S+)\s+"
    r"(?P<ddr>\d+)/(?P<npu>\d+)/(?P<total>\d+)\s+(?P<rw>[\d.]+)\s+(?P<full>\S+)\s*$"
)
_MEMORY = re.compile(r"Total (?P<kind>Internal|Weight) Memory Size:\s*(?P<value>[\d.]+)\s*(?P<unit>[KMG]?B)")
_UNITS = {"B": 1 / 1024, "KB": 1.0, "MB": 1024.0, "GB": 1024.0 * 1024.0}
_IO_OPERATORS = ("InputOperator", "OutputOperator")
_SUFFIX_MARKS = ("_", "#")


@dataclass(frozen=True)
class Layer:
    """One row of the layer table."""

    index: int
    op_type: str
    """The toolkit's (possibly fused) op type: ConvHardSwish, exSoftmax13, ..."""
    dtype: str
    target: str
    """CPU or NPU."""
    cycles_ddr: int
    cycles_npu: int
    cycles_total: int
    rw_kb: float
    full_name: str
    """`<ONNX op type>:<name>` as the toolkit prints it."""

    @property
    def name(self) -> str:
        """The part after the ONNX op type: a node name, possibly with a toolkit suffix."""
        return self.full_name.split(":", 1)[-1]

    @property
    def is_io(self) -> bool:
        return self.op_type in _IO_OPERATORS


@dataclass(frozen=True)
class LayerTable:
    """The table of the last build in a log, with the memory totals (KB) the toolkit printed after it."""

    layers: tuple[Layer, ...]
    internal_kb: float | None
    weight_kb: float | None

    @property
    def compute_layers(self) -> list[Layer]:
        """The layers that do work: all but the input and output operators."""
        return [layer for layer in self.layers if not layer.is_io]

    @property
    def cycles(self) -> int:
        return sum(layer.cycles_total for layer in self.compute_layers)

    @property
    def memory_mb(self) -> float | None:
        """Internal (activations) plus weight memory, in MB (10^6 bytes), or None when not printed."""
        if self.internal_kb is None and self.weight_kb is None:
            return None
        return round(((self.internal_kb or 0.0) + (self.weight_kb or 0.0)) * 1024 / 1e6, 6)


def _payload(line: str) -> str:
    """A log line without colour codes and the `D RKNN: [hh:mm:ss.mmm] ` prefix."""
    line = _ANSI.sub("", line)
    if "] " in line and line.lstrip().startswith(("D RKNN", "I RKNN", "W RKNN")):
        line = line.split("] ", 1)[1]
    return line.strip()


def parse(text: str) -> LayerTable | None:
    """The last layer table in a build log, or None when the log holds none (a build without verbose
    output, or one that stopped before command building)."""
    found: list[Layer] | None = None
    current: list[Layer] | None = None
    internal = weight = None
    for raw in text.splitlines():
        line = _payload(raw)
        if _TITLE in line:
            current = []
            found = current
            internal = weight = None
            continue
        if current is not None:
            row = _ROW.match(line)
            if row:
                current.append(_layer(row))
            elif current and line.startswith("---"):
                current = None
        memory = _MEMORY.search(line)
        if memory and found is not None:
            kb = float(memory["value"]) * _UNITS[memory["unit"]]
            if memory["kind"] == "Internal":
                internal = kb
            else:
                weight = kb
    if not found:
        return None
    return LayerTable(tuple(found), internal, weight)


def _layer(row: re.Match[str]) -> Layer:
    return Layer(
        index=int(row["id"]),
        op_type=row["op"],
        dtype=row["dtype"],
        target=row["target"],
        cycles_ddr=int(row["ddr"]),
        cycles_npu=int(row["npu"]),
        cycles_total=int(row["total"]),
        rw_kb=float(row["rw"]),
        full_name=row["full"],
    )


def node_of(layer_name: str, names: set[str]) -> str | None:
    """The ONNX node a layer names: the whole name, or the longest node name followed by a suffix mark."""
    if layer_name in names:
        return layer_name
    cuts = [i for i, ch in enumerate(layer_name) if ch in _SUFFIX_MARKS]
    for cut in reversed(cuts):
        if layer_name[:cut] in names:
            return layer_name[:cut]
    return None


@dataclass(frozen=True)
class NodePlacement:
    """Where the toolkit runs each runtime ONNX node, and how that was read."""

    devices: dict[str, str]
    """node name -> NPU | CPU"""
    named: frozenset[str]
    """Nodes a layer names."""
    fused: frozenset[str]
    """Nodes no layer names (fused or folded by the toolkit), placed with their nearest named neighbour."""
    unmapped: tuple[Layer, ...]
    """Compute layers that name no ONNX node (layers the toolkit inserted, such as a layout Reshape)."""


def placement(table: LayerTable, facts: Facts) -> NodePlacement:
    """Each runtime node's device by the table: a node any of whose layers runs on the NPU is on the NPU
    (its work is there); a node whose layers all run on the CPU is on the CPU."""
    runtime = facts.runtime_nodes()
    names = {facts.names[i] for i in runtime}
    devices: dict[str, str] = {}
    unmapped: list[Layer] = []
    for layer in table.compute_layers:
        node = node_of(layer.name, names)
        if node is None:
            unmapped.append(layer)
        elif devices.get(node) != "NPU":
            devices[node] = layer.target
    named = dict(devices)
    fused = set()
    for i in runtime:
        name = facts.names[i]
        if name not in named:
            device = _nearest_named(i, facts, named)
            if device is not None:
                devices[name] = device
                fused.add(name)
    return NodePlacement(devices, frozenset(named), frozenset(fused), tuple(unmapped))


def _nearest_named(start: int, facts: Facts, named: dict[str, str]) -> str | None:
    """The device of the named node nearest to `start` in the graph (producers and consumers alike)."""
    seen = {start}
    queue = deque([start])
    while queue:
        i = queue.popleft()
        node = facts.nodes[i]
        around = [facts.producer[t] for t in node.input if t in facts.producer]
        around += [c for t in node.output for c in facts.consumers.get(t, [])]
        for j in around:
            if j in seen or j in facts.const_nodes:
                continue
            seen.add(j)
            if facts.names[j] in named:
                return named[facts.names[j]]
            queue.append(j)
    return None
