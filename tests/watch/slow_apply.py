"""`npuctl apply` with one stage held back after it ran, so a test can change inputs while it runs.

Used as the watcher's runner command in the cancellation test: `python slow_apply.py apply --json SPEC`.
The held stage really runs (its result exists in memory), then sleeps before returning to the engine:
a kill during the sleep must leave no record for its key. Each phase is appended as a JSON line to
$NPUCTL_TEST_MARKER, with the stage's config, so the test knows when to save.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from backends import registry
from backends.sdk.base import StageOutput, StageRequest

STAGE = os.environ["NPUCTL_TEST_SLOW_STAGE"]
HOLD_S = float(os.environ["NPUCTL_TEST_SLOW_S"])
MARKER = Path(os.environ["NPUCTL_TEST_MARKER"])
_original = registry.implementation


def _mark(phase: str, request: StageRequest) -> None:
    line = {"phase": phase, "pid": os.getpid(), "stage": request.stage, "config": dict(request.config)}
    with MARKER.open("a") as fh:
        fh.write(json.dumps(line, sort_keys=True) + "\n")


class Held:
    """Wraps the real implementation (build keys come from its registration, so they are the real ones);
    `held` gives it the real class's name, which no child can unpickle: it runs in this process."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.stage = inner.stage

    def fingerprint(self) -> dict[str, str]:
        result: dict[str, str] = self.inner.fingerprint()
        return result

    def run(self, request: StageRequest) -> StageOutput:
        _mark("started", request)
        output: StageOutput = self.inner.run(request)
        _mark("ran", request)
        time.sleep(HOLD_S)
        _mark("returning", request)
        return output


def held(inner: Any) -> Any:
    real = type(inner)
    namespace = {"__module__": real.__module__, "__qualname__": real.__qualname__}
    return type(real.__name__, (Held,), namespace)(inner)


def implementation(target: Any, stage: str, override: str | None = None) -> Any:
    impl = _original(target, stage, override)
    return held(impl) if stage == STAGE else impl


registry.implementation = implementation  # type: ignore[assignment]

if __name__ == "__main__":
    from reconciler.cli import main

    sys.argv = ["npuctl", *sys.argv[1:]]
    main()
