"""The shared remote cache: stage records and artifacts on any fsspec URL.

A store layer under `.npuctl/store`: the engine looks a key up locally, then here; a build pushes
what it made. Backends never see it. `config` says which remote a repository uses, `cache` talks to
it, `layer` is the engine's side.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from reconciler.remote.cache import Remote
from reconciler.remote.config import ConfigError, RemoteConfig, resolve

__all__ = ["ConfigError", "Remote", "RemoteConfig", "open_remote"]


def open_remote(root: Path, cli_url: str | None, warn: Callable[[str], None]) -> Remote | None:
    """The run's remote (None when none is configured); ConfigError for a refused configuration.
    Nothing connects until the first lookup."""
    config = resolve(root, cli_url)
    return None if config is None else Remote(config, warn)
