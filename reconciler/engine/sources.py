"""What a lock file was built from: the digest of the merged spec and of every input file.

A reader with no local state (CI on a fresh checkout, `plan --base`) can then tell whether a committed
lock file still matches its spec and files, and `audit --model SHA` can match the ONNX file's own sha256.
Only inputs of active stages are hashed, exactly as the build keys see them.
"""

from __future__ import annotations

from typing import Any

from reconciler.engine import keys
from reconciler.engine.chain import StageSetup
from reconciler.spec import LoadedSpec


def spec_digest(spec: LoadedSpec) -> str:
    """sha256 of the merged `spec` section (metadata, comments and `extends` layout excluded)."""
    return keys.digest(spec.field(""))


def file_digests(chain: list[StageSetup]) -> dict[str, str | None]:
    """Input name (model, calibration_data, eval_data, labels) -> content digest, over a variant's chain."""
    out: dict[str, str | None] = {}
    for setup in chain:
        out.update(setup.file_digests)
    return dict(sorted(out.items()))


def lock_sources(spec: LoadedSpec, chain: list[StageSetup]) -> dict[str, Any]:
    return {"spec_digest": spec_digest(spec), "files": file_digests(chain)}
