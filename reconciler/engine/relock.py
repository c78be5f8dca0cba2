"""Signing committed lock files again, by this machine's key: adopting locks written before records
were signed, or moving a repository's records to a new key (a rotated project or CI key).

Only what already stands is signed: a lock that fails its integrity checks is left alone, and so is
every record signed by a key this machine does not trust or whose signature does not verify (that
would launder a forgery). An unsigned record is signed only when asked (`adopt_unsigned`): whoever runs
it vouches for those records, so they run it on locks they know (the repository's own, as committed
before signing existed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reconciler.engine import integrity
from reconciler.state import lockfile
from reconciler.trust.signing import ARTIFACT_INPUTS, Trust, mapping, stage_payload


def _resign_variant(trust: Trust, entry: dict[str, Any], adopt_unsigned: bool) -> tuple[int, list[str]]:
    """Signs the variant's stages in place; returns how many were signed and why others were not."""
    measured = mapping(entry.get("measurements"))
    stages = mapping(entry.get("stages"))
    signed, skipped = 0, []
    for name, stage in sorted(stages.items()):
        payload = stage_payload(name, stages, measured, entry.get(ARTIFACT_INPUTS))
        problem = trust.problem(stage.get("signed"), payload)
        if problem is not None and not (adopt_unsigned and not stage.get("signed")):
            skipped.append(f"{name}: {problem}")
            continue
        fresh = trust.sign(payload)
        if stage.get("signed") != fresh:
            stage["signed"] = fresh
            signed += 1
    return signed, skipped


def sign_locks(trust: Trust, paths: list[Path], adopt_unsigned: bool) -> tuple[list[str], bool]:
    """One line per lock file; and whether every record ended signed by this machine."""
    lines, whole = [], True
    for path in paths:
        lock = lockfile.read(path)
        problems = integrity.problems(lock, path)
        if lock is None or problems:
            lines.append(f"{path}: not signed: " + (problems[0] if problems else "unreadable or absent"))
            whole = False
            continue
        count, skipped = 0, []
        for variant, entry in sorted((lock.get("variants") or {}).items()):
            done, left = _resign_variant(trust, entry, adopt_unsigned)
            count += done
            skipped += [f"{variant}/{why}" for why in left]
        lockfile.write(path, lock)
        lines.append(
            f"{path}: {count} record(s) signed" + (f"; left alone: {'; '.join(skipped)}" if skipped else "")
        )
        whole &= not skipped
    return lines, whole
