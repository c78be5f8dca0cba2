"""What a cached no-op answer stands on besides its files: the engine's code and the identity of
every stage implementation (name, version, toolchain fingerprint).

Light on purpose: the settled cache and the no-op replay both check it, and the replay runs before
the spec package, the workspace or the engine are imported.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from backends import registry
from backends.catalog import Target, targets
from backends.sdk.errors import BackendError
from reconciler.codestat import code_key
from reconciler.state.statcache import stat_of

_IMPL_CACHE: dict[tuple[str, str, str | None], tuple[dict[str, Any], BackendError | None]] = {}


def implementation(
    target: Target, stage: str, override: str | None
) -> tuple[dict[str, Any], BackendError | None]:
    """The key identity of the stage's implementation, or why there is none; from its registration
    (backends.sdk.registration), so plan imports no implementation module whose fingerprint has a recipe."""
    cache_key = (target.id, stage, override)
    if cache_key not in _IMPL_CACHE:
        try:
            info = registry.identity(target, stage, override)
        except BackendError as exc:
            _IMPL_CACHE[cache_key] = ({"name": "unavailable", "version": "0", "fingerprint": {}}, exc)
        else:
            _IMPL_CACHE[cache_key] = (info, None)
    return _IMPL_CACHE[cache_key]


def engine_code(version: int) -> list[Any]:
    """The interpreter and the stat of every module of reconciler and backends, with `version`."""
    import backends
    import reconciler

    parts: list[Any] = [version, sys.version, sys.executable, code_key()]
    for top in (Path(reconciler.__file__).parent, Path(backends.__file__).parent):
        for folder, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".py", ".json")):
                    parts.append(stat_of(os.path.join(folder, name)))
    return parts


def impl_table() -> dict[str, Any]:
    """Every stage implementation identity this run computed (backends' versions and fingerprints)."""
    return {
        json.dumps(list(k)): [info, None if err is None else str(err)]
        for k, (info, err) in _IMPL_CACHE.items()
    }


def impls_hold(table: Any) -> bool:
    """Every identity in `table` (an impl_table of an earlier run) is what this run computes."""
    if not isinstance(table, dict):
        return False
    known = targets()
    for text, recorded in table.items():
        target, stage, override = json.loads(text)
        if target not in known:
            return False
        info, err = implementation(known[target], stage, override)
        if [info, None if err is None else str(err)] != recorded:
            return False
    return True
