"""Where the repository is, and where npuctl keeps its state inside it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


def find_root(start: Path) -> Path:
    """The nearest ancestor holding .git or .npuctl; `start` itself when there is none."""
    start = start.resolve()
    for candidate in (start, *start.parents):
        if (candidate / ".git").exists() or (candidate / ".npuctl").is_dir():
            return candidate
    return start


@dataclass(frozen=True)
class Layout:
    root: Path

    @property
    def state_dir(self) -> Path:
        return self.root / ".npuctl"

    @property
    def store(self) -> Path:
        return self.state_dir / "store"

    @property
    def database(self) -> Path:
        return self.state_dir / "state.db"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def locks(self) -> Path:
        return self.state_dir / "locks"

    @property
    def tmp(self) -> Path:
        return self.state_dir / "tmp"

    def default_specs(self) -> Path:
        return self.root / "specs"

    @staticmethod
    def lock_file(spec_file: Path) -> Path:
        """specs/NAME.yaml -> specs/NAME.lock.json"""
        return spec_file.with_name(spec_file.name.rsplit(".", 1)[0] + ".lock.json")
