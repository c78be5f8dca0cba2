"""A LoadedSpec to and from its validated-spec cache entry (reconciler.spec._cache).

The entry keeps what the engine reads (spec JSON, name, merged document, sources) and where the name
is written, so a hit needs no YAML parse and no pydantic. A pass of the model checks is remembered with
the stat of the model file as the spec names it (a retargeted symlink changes it), and only when the
spec uses built-in backends and no installed package's model: what they depend on is then the spec,
the model file and npuctl's own code, all in the key. A model that changed during the run is not
remembered (the racy rule, reconciler.state.statcache).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from reconciler.spec._cache import SpecCache
from reconciler.spec._load import LoadedSpec
from reconciler.state.statcache import trusted


def from_cache(cache: SpecCache, file: Path, root: Path) -> tuple[LoadedSpec, tuple[Path, int, int]] | None:
    """The cached spec of `file`, a path as discovery returns it (resolved)."""
    path = file
    entry = cache.get(path)
    if entry is None:
        return None
    try:
        sources = tuple(Path(s) for s in entry["sources"])
        spec = LoadedSpec(path, sources, entry["spec"], str(entry["name"]), entry["document"], root)
        where, line, column = entry["name_at"]
        return spec, (Path(where), int(line), int(column))
    except (KeyError, TypeError, ValueError):
        cache.forget(path)
        return None


def remember(cache: SpecCache, spec: LoadedSpec, name_at: tuple[Path, int, int]) -> None:
    data = {
        "spec": spec.spec_json,
        "name": spec.name,
        "document": spec.document,
        "sources": [str(s) for s in spec.sources],
        "name_at": [str(name_at[0]), name_at[1], name_at[2]],
    }
    if json.loads(json.dumps(data)) != data:  # e.g. a non-string key: a JSON copy would differ
        cache.forget(spec.path)
        return
    cache.put(spec.path, spec.sources, data)


def _model_key(cache: SpecCache, spec: LoadedSpec) -> list[Any] | None:
    from backends import registry
    from backends.catalog import targets

    backend = spec.field("compile.backend")
    target = targets().get(spec.target)
    if spec.field("model.package") is not None or target is None:
        return None
    if target.backend not in registry.BUILTIN or (backend is not None and backend not in registry.BUILTIN):
        return None
    model = os.path.join(os.path.dirname(spec.path), str(spec.field("model.path")))
    stat = cache.stat(model)
    return None if stat is None else [model, stat]


def model_checked(cache: SpecCache, spec: LoadedSpec) -> bool:
    entry = cache.entries.get(str(spec.path))
    key = _model_key(cache, spec) if entry is not None else None
    return entry is not None and key is not None and entry.get("model") == key


def mark_model_checked(cache: SpecCache, spec: LoadedSpec) -> None:
    entry = cache.entries.get(str(spec.path))
    key = _model_key(cache, spec)
    if entry is None or key is None or entry.get("model") == key or not trusted(key[1], cache.started):
        return
    entry["model"] = key
    cache.changed = True
