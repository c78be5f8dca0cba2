"""The stat of the engine's own code: what validation depends on besides the spec.

Light on purpose (no spec, no engine): a replayed no-op imports it before anything else.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from reconciler.state.statcache import stat_of

SPEC_CACHE_VERSION = 1
"""The spec cache's format (reconciler.spec._cache): the salt of its code key."""


@cache
def code_key(salt: int = SPEC_CACHE_VERSION) -> str:
    """What validation depends on besides the spec: the modules of the spec package and of every
    backend (options schemas, spec limits) and the target catalog, built-in and installed plug-ins',
    by their stats (~200 stats, once a run). A spec valid only with a plug-in is not valid from the
    cache of a run that had it."""
    import backends
    from backends.catalog import plugin_folders

    parts: list[Any] = [salt]
    spec_folder = Path(__file__).parent / "spec"
    for top in (spec_folder, Path(backends.__file__).parent, *plugin_folders()):
        for folder, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".py", ".json")):
                    parts.append([os.path.join(folder, name), stat_of(os.path.join(folder, name))])
    return json.dumps(parts)
