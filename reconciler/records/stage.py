"""A stage record as the lock holds it: the stage's key, what it made, and what the key was made of."""

from __future__ import annotations

from typing import Any

from reconciler.records._base import Count, Digest, Record, described


class Artifact(Record):
    digest: Digest
    file: str = described("the file name the stage gave it")
    size: Count


class StageRecord(Record):
    key: Digest
    artifacts: dict[str, Artifact] = described("artifact name -> the store object holding it")
    identity: bool = described("the stage passed its input through unchanged (no artifact of its own)")
    impl: dict[str, Any] = described("the implementation that built it (name, version, fingerprint)")
    inputs: dict[str, Any] = described(
        "the key inputs (key = sha256 of their canonical JSON): plan explains a changed key from them "
        "on any clone"
    )
