"""A small JSON summary of an ONNX model (inputs, nodes), cached so validation stays fast; read
without the initializer bytes (backends.passes.skim), so a 1 GB model costs a few kilobytes of reads.

Reading it needs ONNX's message classes only (backends.passes.onnx_proto, not the onnx package, whose
import takes about 0.5 s); the summary is still computed once per model file version and
kept under `<root>/.npuctl/cache/onnx-summary/`, one file per (absolute path, stat key). A client of
reconciler.state.statcache: a model that changed within the racy window of being read is not cached.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.sdk import pathpolicy
from reconciler.state import statcache

SUMMARY_VERSION = 4
"""The summary format: bump it when a summary changes shape. A summary holds no sha256 (that is computed
only for a pin, by the shared digest) and is read without initializer data."""
Dim = int | str | None
"""A fixed size, the name of a dynamic dimension, or None for an unnamed dynamic one."""


class ModelError(Exception):
    """The file is not a readable ONNX model; the message is one line."""


@dataclass(frozen=True)
class InputInfo:
    name: str
    dims: tuple[Dim, ...]


@dataclass(frozen=True)
class ModelSummary:
    inputs: tuple[InputInfo, ...]
    """Graph inputs that are not initializers, in graph order."""
    nodes: tuple[tuple[str, str], ...]
    """(name, op_type) of each top-level node; unnamed or duplicate nodes carry the `<op_type>_<index>`
    name the import stage gives them."""
    problems: tuple[str, ...] = ()
    """What the import stage will refuse the graph for (backends.passes.graph_rules), one line each."""

    def to_json(self) -> dict[str, Any]:
        return {
            "version": SUMMARY_VERSION,
            "inputs": [{"name": i.name, "dims": list(i.dims)} for i in self.inputs],
            "nodes": [list(n) for n in self.nodes],
            "problems": list(self.problems),
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ModelSummary:
        if raw.get("version") != SUMMARY_VERSION:
            raise ValueError("old summary format")
        inputs = tuple(InputInfo(str(i["name"]), tuple(i["dims"])) for i in raw["inputs"])
        nodes = tuple((str(n[0]), str(n[1])) for n in raw["nodes"])
        return cls(inputs, nodes, tuple(str(p) for p in raw["problems"]))

    def input(self, name: str) -> InputInfo | None:
        return next((i for i in self.inputs if i.name == name), None)


_memo: dict[tuple[str, statcache.Stat], ModelSummary] = {}
"""In-process summaries by file key: 200 specs of one model read its summary once."""


def sha256_file(path: Path) -> str:
    """The file's sha256, through the one streaming digest the engine shares (read once per version)."""
    from reconciler.state.digest import sha256

    return sha256(str(path), pathpolicy.require_regular(path))[0]


def summary(path: Path, root: Path) -> ModelSummary:
    """The summary of the model at `path` (absolute), from memory, the cache, or by reading it."""
    started = time.time_ns()
    key = (str(path), statcache.key(path.stat()))
    if key in _memo and statcache.enabled():
        return _memo[key]
    folder = statcache.folder(root / ".npuctl")
    cache = None if folder is None else folder / "onnx-summary" / (_key_digest(key) + ".json")
    found = _read_cache(cache) if cache is not None else None
    if found is None:
        found = summarize(path)
        if not statcache.trusted(key[1], started):
            return found
        if cache is not None:
            statcache.write(cache, json.dumps(found.to_json(), sort_keys=True))
    _memo[key] = found
    return found


def _key_digest(key: tuple[str, statcache.Stat]) -> str:
    return hashlib.sha256(json.dumps([SUMMARY_VERSION, *key]).encode()).hexdigest()[:32]


def _read_cache(cache: Path) -> ModelSummary | None:
    raw = statcache.read_json(cache)
    try:
        return ModelSummary.from_json(raw) if isinstance(raw, dict) else None
    except (ValueError, KeyError, TypeError, IndexError):
        return None


def summarize(path: Path) -> ModelSummary:
    """Read the model with ONNX's protobuf messages (not the onnx package: slow to import) and
    summarize it."""
    from backends.passes.onnx_proto import model_proto
    from backends.passes.skim import skim

    try:
        with pathpolicy.open_regular(path) as fh:
            model = model_proto().FromString(skim(fh, os.fstat(fh.fileno()).st_size))
    except pathpolicy.PathRefused as exc:
        raise OSError(str(exc)) from None
    except Exception as exc:  # protobuf raises several unrelated types for a corrupt file
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"not a readable ONNX model: {detail}") from None
    graph = model.graph
    if model.ir_version <= 0 or (not graph.node and not graph.input):
        raise ModelError("not an ONNX model: it has no graph")
    initializers = {init.name for init in graph.initializer}
    inputs = tuple(
        InputInfo(value.name, _dims(value)) for value in graph.input if value.name not in initializers
    )
    from backends.passes.facts import node_names

    names = node_names(graph.node)  # the names the import stage gives unnamed nodes
    nodes = tuple((name, node.op_type) for name, node in zip(names, graph.node, strict=True))
    from backends.passes.graph_rules import graph_problems

    return ModelSummary(inputs, nodes, tuple(graph_problems(model)))


def _dims(value: Any) -> tuple[Dim, ...]:
    dims: list[Dim] = []
    for dim in value.type.tensor_type.shape.dim:
        if dim.HasField("dim_value") and dim.dim_value > 0:
            dims.append(int(dim.dim_value))
        else:
            dims.append(dim.dim_param or None)
    return tuple(dims)
