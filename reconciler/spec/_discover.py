"""Which files are deployment specs.

A file named explicitly is a spec unless it declares `kind: DeploymentBase` (a partial spec, only
valid through `extends`). A spec named like a lock file (`x.lock.yaml`), or whose lock file's name
would be too long for the file system, is an error of that file, never skipped. A directory is scanned non-recursively for *.yaml and
*.yml files (hidden files skipped), so sub-directories can hold shared bases, models and data; a
scanned file is a spec when its top-level kind is Deployment, when it has no top-level kind at all
(a broken spec is reported, never silently skipped), or when it claims `apiVersion: npuctl/...`
with another kind (reported as an invalid kind). Files declaring any other kind without an npuctl
apiVersion are foreign YAML and skipped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from backends.sdk import pathpolicy
from reconciler.spec._errors import SpecError, SpecErrors

_SUFFIXES = (".yaml", ".yml")
_KIND = re.compile(r"^kind:[ \t]*['\"]?([A-Za-z0-9_-]+)", re.MULTILINE)
_NPUCTL = re.compile(r"^apiVersion:[ \t]*['\"]?npuctl/", re.MULTILINE)
_HEAD = 64 * 1024


def discover(paths: Sequence[Path], root: Path) -> list[Path]:
    """The spec files (absolute, sorted, unique) under files and directories; SpecErrors for missing ones."""
    files, errors = discover_with_errors(paths, root)
    if errors:
        raise SpecErrors(errors)
    return files


def discover_with_errors(
    paths: Sequence[Path], root: Path | None = None
) -> tuple[list[Path], list[SpecError]]:
    """Like `discover`, errors returned. With `root`, a spec file inside it whose symlink leads outside,
    or that is not a regular file (a FIFO, a device), is an error (backends.sdk.pathpolicy), never read."""
    found: set[Path] = set()
    errors: list[SpecError] = []
    for given in paths:
        path = Path(given).absolute()
        if path.is_dir():
            for child in sorted(path.iterdir()):
                visible = child.suffix in _SUFFIXES and not child.name.startswith(".")
                if visible and not child.is_dir():
                    _add(child, root, found, errors, explicit=False)
        elif path.exists() or path.is_symlink():
            _add(path, root, found, errors, explicit=True)
        else:
            errors.append(SpecError(path, 0, 0, "", "no such file or directory"))
    return sorted(found), errors


NAME_MAX = 255
"""The longest file name (in bytes) of the file systems npuctl runs on, when the folder's own limit
cannot be asked (os.pathconf)."""
_TEMP_EXTRA = len(".") + len(".12345678.tmp")
"""What the temp file a lock is first written to adds to its name (reconciler.state.lockfile.write)."""


def _name_errors(path: Path) -> list[SpecError]:
    """A spec named like a lock file, or so long that its lock file's name cannot exist, is an error
    of that file: it would be skipped or fail every command, and it blocks no other spec."""
    stem = path.name.rsplit(".", 1)[0]
    if stem.endswith(".lock"):
        return [
            SpecError(
                path,
                0,
                0,
                "",
                f"a spec file is not named *{path.name[len(stem) - 5 :]}: that is how "
                "lock files are named; rename it (its lock file will be NAME.lock.json beside it)",
            )
        ]
    lock_name = f"{stem}.lock.json"
    try:
        limit = os.pathconf(path.parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = NAME_MAX
    needed = len(os.fsencode(lock_name)) + _TEMP_EXTRA
    if needed > limit:
        return [
            SpecError(
                path,
                0,
                0,
                "",
                f"file name too long: its lock file {lock_name[:40]}... and the "
                f"temp file it is written through need {needed} bytes, over this file system's "
                f"{limit}; shorten the name by {needed - limit} characters or more",
            )
        ]
    return []


def _add(path: Path, root: Path | None, found: set[Path], errors: list[SpecError], explicit: bool) -> None:
    try:
        if root is not None and pathpolicy.inside(path, root.resolve()):
            resolved = pathpolicy.regular_file(path, root, path.name)
        else:
            resolved = pathpolicy.resolve(path)
            pathpolicy.require_regular(resolved)
    except pathpolicy.PathRefused as exc:
        errors.append(SpecError(path, 0, 0, "", str(exc)))
        return
    if not _is_spec(resolved, explicit=explicit):
        return
    named = _name_errors(path)
    if named:
        errors.extend(named)
    else:
        found.add(resolved)


def _is_spec(path: Path, explicit: bool) -> bool:
    try:
        with pathpolicy.open_regular(path) as handle:
            head = handle.read(_HEAD).decode("utf-8", errors="replace")
    except (OSError, pathpolicy.PathRefused):
        return True  # unreadable: let the loader report it
    match = _KIND.search(head)
    kind = match.group(1) if match else None
    if kind == "DeploymentBase":
        return False
    if explicit or kind in (None, "Deployment"):
        return True
    return _NPUCTL.search(head) is not None
