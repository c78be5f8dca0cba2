"""The public surface every backend builds on, built-in or plug-in.

Backends import this package and its modules, never another backend's private modules, and never the
reconciler (pyproject's import contracts, tests/test_layers.py). Importing it imports no toolchain.

The names exported here are the protocol a backend implements and the errors it raises:

- `Backend`, `StageImpl`, `StageRequest`, `StageOutput`, `StageLog`, `STAGES` (backends.sdk.base);
- `BackendError`, `TerminalError`, `TransientError`, `ToolchainMissing`, `UnsupportedStage`
  (backends.sdk.errors): what a stage raises, toolchain exceptions translated at the adapter boundary;
- `Registration`, `Dist`, `Call`, `by_stage` (backends.sdk.registration): a backend's `stages` table,
  the one place a stage implementation's key identity is written;
- `Verdict`, `Evidence`, `EvidenceKind`, `Tone` (backends.sdk.vocab): the words a verdict and its
  evidence are recorded and shown with, defined once.

Its modules, imported by name where they are needed:

- measure: the shared half of evaluate (samples, runner outputs, scoring, measurements);
- worker: `run_worker`, a managed toolchain's worker script in its own venv, errors translated;
- process: the one way to start a child process (argv of a Python child, a bounded run of a program);
- child_call, stage_child: a stage run in a child interpreter, so a toolchain crash cannot take npuctl;
- toolchains, dists, host: managed venvs, installed versions, what of this host enters a key;
- pathpolicy, outside_tmp: what may be read or written inside an untrusted repository, and scratch
  folders outside it;
- artifact_check, bundles, metadata, evidence, harness: checking an artifact against its source,
  reproducible tar bundles, records inside ONNX metadata, evidence rules, the shared timing harness;
- vendor_bundle: the stages shared by adapters whose vendor SDK cannot be installed here (they write
  the exact files the vendor tool takes, and run it only where it is found).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backends.sdk.base import STAGES, Backend, StageImpl, StageLog, StageOutput, StageRequest
    from backends.sdk.errors import (
        BackendError,
        TerminalError,
        ToolchainMissing,
        TransientError,
        UnsupportedStage,
    )
    from backends.sdk.registration import Call, Dist, Registration, by_stage
    from backends.sdk.vocab import Evidence, EvidenceKind, Tone, Verdict

_HOME = {
    **dict.fromkeys(("STAGES", "Backend", "StageImpl", "StageLog", "StageOutput", "StageRequest"), "base"),
    **dict.fromkeys(
        ("BackendError", "TerminalError", "ToolchainMissing", "TransientError", "UnsupportedStage"), "errors"
    ),
    **dict.fromkeys(("Call", "Dist", "Registration", "by_stage"), "registration"),
    **dict.fromkeys(("Evidence", "EvidenceKind", "Tone", "Verdict"), "vocab"),
}
"""Each exported name's module: imported when the name is first read, so importing one of this
package's modules (pathpolicy, child_call) does not import the others."""


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "STAGES",
    "Backend",
    "BackendError",
    "Call",
    "Dist",
    "Evidence",
    "EvidenceKind",
    "Registration",
    "StageImpl",
    "StageLog",
    "StageOutput",
    "StageRequest",
    "TerminalError",
    "Tone",
    "ToolchainMissing",
    "TransientError",
    "UnsupportedStage",
    "Verdict",
    "by_stage",
]
