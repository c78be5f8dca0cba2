"""Safe, bounded YAML that remembers where every value came from.

A spec arriving in a pull request is untrusted input, so this reader builds its own tree from the
parser's events instead of using a constructor: only the core scalar tags are accepted (no Python
objects, no custom tags), and size, nesting depth and alias expansion are bounded so that a
"billion laughs" file is refused after a bounded amount of work. Duplicate keys and non-string keys
are errors. Each node keeps its 1-based line and column (and its file, so that values merged in from
an `extends` base still point at the base file).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends.sdk import pathpolicy
from reconciler.spec._errors import SpecError, SpecErrors
from reconciler.spec._tree import Flat, Loc, Map, Mark, Node, Scalar, Seq, children, describe, dotted, flatten

__all__ = [
    "Flat",
    "Loc",
    "Map",
    "Mark",
    "Node",
    "Scalar",
    "Seq",
    "describe",
    "dotted",
    "flatten",
    "parse",
    "read",
]

MAX_BYTES = 1 << 20
"""Largest spec file accepted (1 MiB): real specs are a few kB."""
MAX_DEPTH = 32
"""Deepest nesting accepted, also after alias expansion."""
MAX_NODES = 20_000
"""Most values a document may expand to (aliases counted each time they are used)."""

_CORE = "tag:yaml.org,2002:"
_SCALAR_TAGS = {_CORE + t for t in ("null", "bool", "int", "float", "str")}
_MERGE = _CORE + "merge"
_STR = _CORE + "str"
_TIMESTAMP = _CORE + "timestamp"


def read(path: Path) -> Node:
    """The YAML document in `path`, as a positioned tree; SpecErrors when it is unsafe or malformed."""
    try:
        with pathpolicy.open_regular(path) as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_BYTES:
                raise _fail(path, 0, 0, f"file is {size} bytes; specs are limited to {MAX_BYTES} bytes")
            raw = handle.read(MAX_BYTES + 1)
    except pathpolicy.PathRefused as exc:
        raise _fail(path, 0, 0, f"cannot read: {exc}") from None
    except OSError as exc:
        raise _fail(path, 0, 0, f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise _fail(path, 0, 0, f"file exceeds {MAX_BYTES} bytes")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        byte = raw[exc.start : exc.start + 1].hex()
        raise _fail(path, line, column, f"not UTF-8 text (byte 0x{byte} at offset {exc.start})") from None
    return parse(text, path)


def parse(text: str, file: Path) -> Node:
    """Parse one YAML document; raises SpecErrors with every problem found."""
    import yaml  # here: a spec read from the validated-spec cache needs no YAML parser

    builder = _Builder(file)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        while loader.check_event():
            builder.feed(loader.get_event())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
        problem = exc.problem or exc.context or "invalid YAML"
        builder.errors.append(SpecError(file, line, column, "", f"invalid YAML: {problem}"))
        raise SpecErrors(builder.errors) from None
    except yaml.YAMLError as exc:
        builder.errors.append(SpecError(file, 0, 0, "", f"invalid YAML: {exc}"))
        raise SpecErrors(builder.errors) from None
    finally:
        loader.dispose()
    if builder.errors:
        raise SpecErrors(builder.errors)
    if builder.root is None:
        raise _fail(file, 0, 0, "empty document: expected a mapping with apiVersion, kind, metadata, spec")
    _measure(builder.root, file)
    return builder.root


def _fail(file: Path, line: int, column: int, message: str, loc: Loc = ()) -> SpecErrors:
    return SpecErrors([SpecError(file, line, column, dotted(loc), message)])


class _MergeKey:
    """Marks the pending key of a mapping as the YAML merge key `<<`."""


_MERGE_KEY = _MergeKey()
_SKIP = object()


@dataclass(eq=False)
class _Frame:
    node: Map | Seq
    loc: Loc
    key: tuple[str, Mark] | _MergeKey | object | None = None
    merges: list[Node] = field(default_factory=list)


class _Builder:
    """Turns parser events into Map/Seq/Scalar nodes, checking tags, keys, depth and anchors."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.errors: list[SpecError] = []
        self.root: Node | None = None
        self.stack: list[_Frame] = []
        self.anchors: dict[str, Node] = {}
        self.documents = 0
        import yaml

        self.resolver = yaml.resolver.Resolver()
        self.constructor = yaml.constructor.SafeConstructor()

    def mark(self, event: Any) -> Mark:
        return Mark(self.file, event.start_mark.line + 1, event.start_mark.column + 1)

    def fatal(self, mark: Mark, message: str) -> SpecErrors:
        self.errors.append(SpecError(self.file, mark.line, mark.column, dotted(self.child_loc()), message))
        return SpecErrors(self.errors)

    def feed(self, event: Any) -> None:
        import yaml

        if isinstance(event, yaml.DocumentStartEvent):
            self.documents += 1
            if self.documents > 1:
                raise self.fatal(self.mark(event), "only one YAML document per file is allowed")
        elif isinstance(event, yaml.ScalarEvent):
            self.add(self.scalar(event))
        elif isinstance(event, yaml.AliasEvent):
            self.alias(event)
        elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            self.start(event)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            self.end()

    def scalar(self, event: Any) -> Scalar:
        import yaml

        mark = self.mark(event)
        tag = event.tag
        if tag is None or tag == "!":
            # quoted scalars are strings; plain ones are typed by the YAML 1.1 resolver
            tag = _STR if event.style else self.resolver.resolve(yaml.ScalarNode, event.value, event.implicit)
        if tag == _TIMESTAMP:
            tag = _STR  # dates stay text: a version label "2024-05-01" is a string
        value: Any
        if tag == _STR:
            value = event.value
        elif tag == _MERGE:
            value = _MERGE_KEY
        elif tag in _SCALAR_TAGS:
            construct = self.constructor.yaml_constructors[tag]
            value = construct(self.constructor, yaml.ScalarNode(tag, event.value))
        else:
            message = f"tag {_short(event.tag or tag)} is not allowed: a spec holds plain values only"
            raise self.fatal(mark, message)
        result = Scalar(mark, value, event.value, not event.style, loc=self.child_loc())
        self.register(event, result)
        return result

    def register(self, event: Any, node: Node) -> None:
        if event.anchor is not None:
            self.anchors[event.anchor] = node

    def alias(self, event: Any) -> None:
        mark = self.mark(event)
        node = self.anchors.get(event.anchor)
        if node is None:
            raise self.fatal(mark, f"unknown alias *{event.anchor}")
        if any(frame.node is node for frame in self.stack):
            raise self.fatal(mark, f"recursive alias *{event.anchor}")
        self.add(node)

    def start(self, event: Any) -> None:
        import yaml

        mark = self.mark(event)
        if len(self.stack) >= MAX_DEPTH:
            raise self.fatal(mark, f"nesting deeper than {MAX_DEPTH} levels")
        mapping = isinstance(event, yaml.MappingStartEvent)
        allowed = (None, "!", _CORE + ("map" if mapping else "seq"))
        if event.tag not in allowed:
            raise self.fatal(mark, f"tag {_short(event.tag)} is not allowed: a spec holds plain values only")
        if self.stack and isinstance(self.stack[-1].node, Map) and self.stack[-1].key is None:
            raise self.fatal(mark, "mapping keys must be strings, not collections")
        loc = self.child_loc()
        node: Map | Seq = Map(mark, loc=loc) if mapping else Seq(mark, loc=loc)
        self.register(event, node)
        self.stack.append(_Frame(node, loc))

    def end(self) -> None:
        frame = self.stack.pop()
        node = frame.node
        if isinstance(node, Map) and frame.merges:
            self.apply_merges(node, frame.merges)
        self.add(node)

    def child_loc(self) -> Loc:
        if not self.stack:
            return ()
        top = self.stack[-1]
        if isinstance(top.node, Seq):
            return (*top.loc, len(top.node.items))
        if isinstance(top.key, tuple):
            return (*top.loc, top.key[0])
        return top.loc

    def add(self, node: Node) -> None:
        if not self.stack:
            self.root = node
            return
        top = self.stack[-1]
        if isinstance(top.node, Seq):
            top.node.items.append(node)
        elif top.key is None:
            top.key = self.key(top, node)
        else:
            self.put(top, node)

    def key(self, frame: _Frame, node: Node) -> tuple[str, Mark] | _MergeKey | object:
        assert isinstance(frame.node, Map)
        if isinstance(node, Scalar) and node.value is _MERGE_KEY:
            return _MERGE_KEY
        if isinstance(node, Scalar) and isinstance(node.value, str):
            previous = frame.node.entries.get(node.value)
            if previous is not None:
                first = previous[0]
                self.errors.append(
                    SpecError(
                        self.file,
                        node.mark.line,
                        node.mark.column,
                        dotted((*frame.loc, node.value)),
                        f"duplicate key {node.value!r} (first at line {first.line}, column {first.column})",
                    )
                )
                return _SKIP
            return (node.value, node.mark)
        text = node.text if isinstance(node, Scalar) else "?"
        self.errors.append(
            SpecError(
                self.file,
                node.mark.line,
                node.mark.column,
                dotted(frame.loc),
                f"keys must be strings: quote {text!r} (YAML reads it as {_kind(node)})",
            )
        )
        return _SKIP

    def put(self, frame: _Frame, node: Node) -> None:
        assert isinstance(frame.node, Map)
        key = frame.key
        frame.key = None
        if key is _MERGE_KEY:
            sources = node.items if isinstance(node, Seq) else [node]
            for source in sources:
                if not isinstance(source, Map):
                    self.errors.append(
                        SpecError(
                            self.file,
                            source.mark.line,
                            source.mark.column,
                            dotted(frame.loc),
                            "the merge key << takes a mapping or a list of mappings",
                        )
                    )
                    continue
                frame.merges.append(source)
        elif isinstance(key, tuple):
            frame.node.entries[key[0]] = (key[1], node)

    @staticmethod
    def apply_merges(node: Map, sources: list[Node]) -> None:
        for source in sources:
            assert isinstance(source, Map)
            for name, entry in source.entries.items():
                node.entries.setdefault(name, entry)


def _short(tag: str) -> str:
    return "!!" + tag.removeprefix(_CORE) if tag.startswith(_CORE) else tag


def _kind(node: Node) -> str:
    if isinstance(node, Map):
        return "a mapping"
    if isinstance(node, Seq):
        return "a list"
    assert isinstance(node, Scalar)
    return describe(node.value)


def _measure(root: Node, file: Path) -> None:
    """Refuse documents whose alias expansion is too large or too deep, without expanding them.

    Sizes and heights are memoized per node, so the work is linear in the text however much the
    aliases would expand; a bomb is reported at the smallest value that already expands too far.
    """
    sizes: dict[int, tuple[int, int]] = {}

    def visit(node: Node, depth: int) -> tuple[int, int]:
        known = sizes.get(id(node))
        if known is None:
            if depth > MAX_DEPTH:
                raise _too_deep(root, file)
            size, height = 1, 0
            for child in children(node):
                child_size, child_height = visit(child, depth + 1)
                size, height = size + child_size, max(height, child_height + 1)
            known = sizes[id(node)] = (size, height)
        if depth + known[1] > MAX_DEPTH:
            raise _too_deep(root, file)
        return known

    total, _ = visit(root, 0)
    if total <= MAX_NODES:
        return
    node = root
    while True:
        bigger = next((c for c in children(node) if sizes[id(c)][0] > MAX_NODES), None)
        if bigger is None:
            break
        node = bigger
    message = (
        f"value expands to {sizes[id(node)][0]} values through aliases, more than {MAX_NODES} (alias bomb?)"
    )
    raise _fail(file, node.mark.line, node.mark.column, message, node.loc)


def _too_deep(root: Node, file: Path) -> SpecErrors:
    message = f"nesting deeper than {MAX_DEPTH} levels after alias expansion"
    return _fail(file, root.mark.line, root.mark.column, message)
