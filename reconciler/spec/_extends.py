"""`extends`: a spec deep-merged over another file, so one model goes to several targets.

Mappings merge recursively; lists and scalars are replaced by the child's value (set a key to null to
drop an inherited section). Chains are allowed, cycles are errors naming the cycle. A base may be a
full spec (`kind: Deployment`) or a partial one (`kind: DeploymentBase`, valid only through extends).

Paths inside a base are relative to the file that wrote them. After merging, every inherited path
field (reconciler.spec.pathfields; not one relative to an installed package) is rebased to the child's
folder, so the merged spec's paths are all relative to the spec file itself, while error positions
still point at the base file where the path was written.
"""

from __future__ import annotations

import os
import time
from pathlib import Path, PurePath

from backends.sdk import pathpolicy
from reconciler.spec._errors import SpecError, SpecErrors, display_path
from reconciler.spec._yaml import Flat, Map, Node, Scalar, read
from reconciler.spec.pathfields import named
from reconciler.state import statcache

MAX_CHAIN = 16
API_VERSION = "npuctl/v1"
BASE_KINDS = ("Deployment", "DeploymentBase")


def _fail(node: Node, field: str, message: str) -> SpecErrors:
    return SpecErrors([SpecError(node.mark.file, node.mark.line, node.mark.column, field, message)])


def entry(tree: Node, key: str) -> Node | None:
    """The value of a top-level key, or None."""
    if isinstance(tree, Map) and key in tree.entries:
        return tree.entries[key][1]
    return None


def resolve(path: Path, tree: Node, root: Path) -> tuple[Node, tuple[Path, ...]]:
    """The tree of `path` merged over its chain of bases, and every file involved (child first)."""
    chain = [path]
    trees = [tree]
    real_root = pathpolicy.resolve(root)
    while (ref := entry(trees[-1], "extends")) is not None:
        if isinstance(ref, Scalar) and ref.value is None:
            break
        base = _base_path(ref, chain, real_root)
        base_tree = _read_base(base)
        _check_base(base_tree, base)
        chain.append(base)
        trees.append(base_tree)
    merged = trees[-1]
    for child in reversed(trees[:-1]):
        merged = merge(merged, child)
    return merged, tuple(chain)


_BASES: dict[tuple[str, statcache.Stat], Node] = {}
"""Parsed base files by path and stat key: a base shared by 300 specs is parsed once per run (and again
only after it changes, in watch mode; reconciler.state.statcache says when a stat vouches for a file).
Trees are never modified (merge builds new mappings)."""
MAX_BASES = 256


def _read_base(path: Path) -> Node:
    started = time.time_ns()
    try:
        key = (str(path), statcache.key(os.stat(path)))
    except OSError:
        return read(path)  # read() names the problem
    if key in _BASES and statcache.enabled():
        return _BASES[key]
    tree = read(path)
    if statcache.trusted(key[1], started):
        if len(_BASES) >= MAX_BASES:
            _BASES.clear()
        _BASES[key] = tree
    return tree


def _base_path(ref: Node, chain: list[Path], root: Path) -> Path:
    if not isinstance(ref, Scalar) or not isinstance(ref.value, str) or not ref.value:
        raise _fail(ref, "extends", "must be a file name, relative to this file")
    try:
        pathpolicy.check_text(ref.value)
        base = pathpolicy.confine(chain[-1].parent / ref.value, root, ref.value)
    except pathpolicy.PathRefused as exc:
        raise _fail(ref, "extends", str(exc).replace("the spec file", "this file")) from None
    if base in chain:
        cycle = [*chain[chain.index(base) :], base]
        raise _fail(ref, "extends", "extends cycle: " + " -> ".join(display_path(p) for p in cycle))
    if len(chain) > MAX_CHAIN:
        raise _fail(ref, "extends", f"more than {MAX_CHAIN} levels of extends")
    if not base.exists():
        raise _fail(ref, "extends", f"file not found: {display_path(base)}")
    try:
        pathpolicy.require_regular(base)
    except pathpolicy.PathRefused as exc:
        raise _fail(ref, "extends", str(exc)) from None
    return base


def _check_base(tree: Node, path: Path) -> None:
    if not isinstance(tree, Map):
        raise _fail(tree, "", "a base spec must be a mapping")
    kind, api = entry(tree, "kind"), entry(tree, "apiVersion")
    errors: list[SpecError] = []
    for node, field, allowed in ((kind, "kind", BASE_KINDS), (api, "apiVersion", (API_VERSION,))):
        value = node.value if isinstance(node, Scalar) else None
        if value not in allowed:
            where = node if node is not None else tree
            line, column = where.mark.line, where.mark.column
            message = f"a base must set {field}: {' or '.join(allowed)}"
            errors.append(SpecError(path, line, column, field, message))
    if errors:
        raise SpecErrors(sorted(errors, key=SpecError.sort_key))


def merge(base: Node, child: Node) -> Node:
    """Deep merge: mappings recursively, everything else replaced by the child's value."""
    if not (isinstance(base, Map) and isinstance(child, Map)):
        return child
    entries = dict(base.entries)
    for key, (key_mark, value) in child.entries.items():
        if key in entries:
            entries[key] = (key_mark, merge(entries[key][1], value))
        else:
            entries[key] = (key_mark, value)
    return Map(child.mark, entries)


def rebase_paths(flat: Flat, spec_file: Path) -> None:
    """Rewrite inherited relative path fields (in `flat.data`) relative to `spec_file`'s folder."""
    spec = _get(flat.data, ("spec",))
    for field, _ in named(spec if isinstance(spec, dict) else None):
        loc = ("spec", *field.loc)
        node = flat.nodes.get(loc)
        if not isinstance(node, Scalar) or not isinstance(node.value, str) or os.path.isabs(node.value):
            continue
        origin = node.mark.file
        package = None if field.package is None else _get(spec, tuple(field.package.split(".")))
        if origin == spec_file or package is not None:
            continue
        target = os.path.normpath(origin.parent / node.value)
        rebased = PurePath(os.path.relpath(target, spec_file.parent)).as_posix()
        parent = _get(flat.data, loc[:-1])
        if isinstance(parent, dict):
            parent[loc[-1]] = rebased


def _get(data: object, loc: tuple[str, ...]) -> object:
    for key in loc:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data
