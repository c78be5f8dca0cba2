"""Installs `npuctl lock merge` as git's merge driver for lock files, in one command.

git picks a merge driver per path from `.gitattributes` (committed: every clone names the same driver)
and runs the command configured under `merge.<driver>.driver` (local git config: each machine points
at its own npuctl). Without the config a clone falls back to git's line merge, so CI and every
developer run the install once.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

DRIVER = "npuctl-lock"
ATTRIBUTE = f"*.lock.json merge={DRIVER}"


def driver_command() -> str:
    """This interpreter running `npuctl lock merge` (git runs it without the user's virtualenv active)."""
    return f"{shlex.quote(sys.executable)} -m reconciler lock merge %O %A %B %P"


def install(root: Path) -> list[str]:
    """Adds the driver to the repository's git config, then the attribute to `root/.gitattributes`
    (once); one line per change made. OSError, with git's word, outside a git checkout."""
    for key, value in (("name", "npuctl lock file merge"), ("driver", driver_command())):
        done = subprocess.run(
            ["git", "config", f"merge.{DRIVER}.{key}", value], cwd=root, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise OSError(f"git config in {root}: {done.stderr.strip() or done.returncode}")
    changes = [f"git config merge.{DRIVER}.driver {driver_command()!r}"]
    attributes = root / ".gitattributes"  # written only once git took the driver: `root` is a checkout
    lines = attributes.read_text().splitlines() if attributes.exists() else []
    if ATTRIBUTE not in (line.strip() for line in lines):
        attributes.write_text("".join(f"{line}\n" for line in [*lines, ATTRIBUTE]))
        changes.insert(0, f"{attributes.name}: {ATTRIBUTE} (commit it)")
    return changes
