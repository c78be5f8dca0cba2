"""A stage record as the lock holds it: the stage's key, what it made, and what the key was made of."""

from __future__ import annotations

from typing import Any

from reconciler.records._base import Count, Digest, Omittable, Record, described, optional


class Artifact(Record):
    digest: Digest
    file: str = described("the file name the stage gave it")
    size: Count


class Signature(Record):
    """Who vouches for a stage record: an ed25519 signature over its canonical JSON and the
    measurements that name it (reconciler.trust.signing)."""

    key: str = described("the signer's public key, `ed25519:<base64>`", pattern="^ed25519:[A-Za-z0-9+/=]+$")
    sig: str = described("the signature, base64", pattern="^[A-Za-z0-9+/=]+$")


class StageRecord(Record):
    key: Digest
    artifacts: dict[str, Artifact] = described("artifact name -> the store object holding it")
    identity: bool = described("the stage passed its input through unchanged (no artifact of its own)")
    impl: dict[str, Any] = described("the implementation that built it (name, version, fingerprint)")
    inputs: dict[str, Any] = described(
        "the key inputs (key = sha256 of their canonical JSON): plan explains a changed key from them "
        "on any clone"
    )
    signed: Omittable[Signature] = optional(
        "the builder's signature; a record without one, or signed by a key the trust policy "
        "(npuctl-trust.yaml) does not name, counts for nothing"
    )
