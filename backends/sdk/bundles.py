"""Byte-reproducible tar bundles: several files as one artifact (the engine stores files, not folders).

Members are sorted, with mtime 0, uid/gid 0, fixed modes and no compression header timestamps, so the
same files give the same bytes and the same digest.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping
from pathlib import Path

from backends.sdk.errors import TerminalError


def write(path: Path, members: Mapping[str, bytes | Path], executable: frozenset[str] = frozenset()) -> Path:
    """Writes `members` (archive name -> bytes or file) to the tar file `path`."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(members):
            value = members[name]
            data = value.read_bytes() if isinstance(value, Path) else value
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o755 if name in executable else 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


def names(path: Path) -> list[str]:
    with tarfile.open(path, "r") as tar:
        return sorted(tar.getnames())


def read(path: Path, name: str) -> bytes:
    with tarfile.open(path, "r") as tar:
        member = tar.extractfile(name)
        if member is None:
            raise TerminalError(f"{path.name} has no member {name!r}")
        return member.read()


def extract(path: Path, dest: Path) -> Path:
    """Extracts every regular file (no links, no absolute or parent paths) into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "r") as tar:
        for member in tar.getmembers():
            target = (dest / member.name).resolve()
            if not member.isfile() or dest.resolve() not in target.parents:
                raise TerminalError(f"{path.name}: refusing bundle member {member.name!r}")
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None
            target.write_bytes(source.read())
    return dest


def is_bundle(path: Path) -> bool:
    return path.suffix == ".tar" and tarfile.is_tarfile(path)
