"""The positioned tree a spec is read into, and its flattening into plain data with positions.

Every message about a spec points at a file, line and column; these types carry them from the
parser to validation (values merged from an `extends` base keep the base file's marks).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class Mark:
    """A 1-based position in a file."""

    file: Path
    line: int
    column: int


@dataclass(eq=False)
class Node:
    mark: Mark
    loc: Loc = field(default=(), kw_only=True)
    """Where the node is written in its own file (aliases keep their anchor's path)."""


@dataclass(eq=False)
class Scalar(Node):
    value: Any
    text: str
    """The scalar as written, for messages such as "quote it"."""
    plain: bool
    """Written without quotes, so that YAML typed it (yes -> true, 1.10 -> 1.1)."""


@dataclass(eq=False)
class Seq(Node):
    items: list[Node] = field(default_factory=list)


@dataclass(eq=False)
class Map(Node):
    entries: dict[str, tuple[Mark, Node]] = field(default_factory=dict)
    """key -> (position of the key, value)"""


def dotted(loc: Loc) -> str:
    """('spec', 'inputs', 'x', 0) -> 'spec.inputs.x.0'"""
    return ".".join(str(part) for part in loc)


def describe(value: Any) -> str:
    """How a YAML value reads in a message: 'the string "abc"', 'the boolean true', 'a list', ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the number {value}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the string {shown!r}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def children(node: Node) -> Iterator[Node]:
    if isinstance(node, Map):
        for _, value in node.entries.values():
            yield value
    elif isinstance(node, Seq):
        yield from node.items


@dataclass
class Flat:
    """A document as plain data, with the position of every value and every mapping key by path."""

    data: Any
    nodes: dict[Loc, Node]
    keys: dict[Loc, Mark]

    def value_mark(self, loc: Loc) -> Mark | None:
        node = self.nodes.get(loc)
        return node.mark if node is not None else None

    def key_mark(self, loc: Loc) -> Mark | None:
        return self.keys.get(loc)

    def nearest(self, loc: Loc, prefer_key: bool = False) -> tuple[Mark, Loc]:
        """The best position for `loc`: itself, else its nearest ancestor present in the document."""
        for end in range(len(loc), -1, -1):
            prefix = loc[:end]
            first, second = (self.keys, self.nodes) if prefer_key else (self.nodes, self.keys)
            for table in (first, second):
                hit = table.get(prefix)
                if hit is not None:
                    return (hit if isinstance(hit, Mark) else hit.mark), prefix
        root = self.nodes[()]
        return root.mark, ()


def flatten(root: Node) -> Flat:
    """Plain Python data (fresh containers, safe to modify) plus positions by path."""
    nodes: dict[Loc, Node] = {}
    keys: dict[Loc, Mark] = {}

    def build(node: Node, loc: Loc) -> Any:
        nodes[loc] = node
        if isinstance(node, Map):
            out: dict[str, Any] = {}
            for name, (key_mark, value) in node.entries.items():
                child: Loc = (*loc, name)
                keys[child] = key_mark
                out[name] = build(value, child)
            return out
        if isinstance(node, Seq):
            return [build(item, (*loc, i)) for i, item in enumerate(node.items)]
        assert isinstance(node, Scalar)
        return node.value

    data = build(root, ())
    return Flat(data, nodes, keys)
