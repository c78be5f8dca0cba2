"""A compile whose artifact disagrees with the model it compiled is a failed compile stage (one line
naming both numbers and the log), never an accuracy verdict.

The broken compile is the real onnxruntime compile pass with its artifact sabotaged after it was
written: the float weights of the largest initializer are scaled inside the .ort bytes. The sabotage
wraps the implementation in a class made at run time, which cannot be sent to the stage child, so
the engine runs it in its own process (where the monkeypatch lives) and the real check runs on the
sabotaged artifact."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from backends import registry
from backends.onnxruntime import _compile
from backends.sdk.base import StageOutput, StageRequest
from reconciler.engine import world
from reconciler.engine.apply import apply_all
from reconciler.engine.execute import RetryPolicy
from reconciler.engine.reporter import Reporter
from reconciler.engine.workspace import Workspace
from reconciler.spec import check
from tests.conftest import DIGITS_SPEC, copy_digits


def in_process(inner: Any) -> Any:
    """The real implementation wrapped by a class made at run time: it cannot be pickled by
    reference, so the engine runs it in its own process (where the monkeypatch lives) whatever the
    child interpreter could import."""

    class InProcess:
        def __init__(self) -> None:
            self.inner, self.stage = inner, inner.stage

        def fingerprint(self) -> dict[str, str]:
            found: dict[str, str] = self.inner.fingerprint()
            return found

        def run(self, request: StageRequest) -> StageOutput:
            output: StageOutput = self.inner.run(request)
            return output

    return InProcess()


def _sabotage(source: Path, artifact: Path) -> None:
    """Scales the largest float initializer of `source` by 3 where its bytes sit in the .ort."""
    weights = max(onnx.load(str(source)).graph.initializer, key=lambda t: len(t.raw_data))
    raw = numpy_helper.to_array(weights).astype(np.float32).tobytes()
    data = artifact.read_bytes()
    assert data.count(raw) == 1, "level 0 keeps the weights as they are"
    artifact.write_bytes(data.replace(raw, (numpy_helper.to_array(weights) * 3).astype(np.float32).tobytes()))


def test_a_compile_that_changes_the_numbers_fails_the_compile_stage(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_digits(git_repo, eval_samples=10, calib_samples=10)
    spec = DIGITS_SPEC.format(name="broken").replace(
        "  evaluate:", "  compile: {optimization_level: 0}\n  evaluate:"
    )
    (git_repo / "specs" / "broken.yaml").write_text(spec)
    real_compile, real_impl = _compile.compile_ort, registry.implementation

    def compile_then_break(source: Path, artifact: Path, settings: Any, log: Path) -> Any:
        details = real_compile(source, artifact, settings, log)
        _sabotage(source, artifact)
        return details

    def implementation(target: Any, stage: str, override: str | None = None) -> Any:
        impl = real_impl(target, stage, override)
        return in_process(impl) if stage == "compile" else impl

    monkeypatch.setattr(_compile, "compile_ort", compile_then_break)
    monkeypatch.setattr(registry, "implementation", implementation)
    monkeypatch.setattr(world, "_IMPL_CACHE", {})  # what earlier tests in this process looked up
    reports = check([git_repo / "specs"], git_repo)
    ws = Workspace.open(git_repo)
    try:
        [result] = apply_all(ws, [r.spec for r in reports], Reporter(), RetryPolicy(retries=0))
    finally:
        ws.close()
    stages = {s.name: s for s in result.stages}
    assert stages["compile"].action == "failed"
    reason = stages["compile"].reason
    print(reason)
    assert "\n" not in reason
    found = re.search(r"channel \d+ gives (\S+) where the source gives (\S+) \((\S+) of the", reason)
    assert found, reason
    got, want = float(found[1]), float(found[2])
    assert abs(got - want) > 1e-3 * max(abs(want), 1.0), reason  # both numbers named, and they differ
    assert stages["compile"].log and f"log {stages['compile'].log}" in reason
    assert stages["evaluate"].action == "skipped"
    verdicts = {v.name: v for v in result.slo}
    assert verdicts["accuracy.min"].verdict == "unverified" and verdicts["accuracy.min"].passed is None
    assert not any(v.verdict.startswith("fail") for v in result.slo), "no accuracy drop is reported"
    latency = verdicts["latency_ms.p90"]  # and no roofline estimate of an artifact that does not exist
    assert latency.value is None and latency.passed is None and latency.verdict == "unverified"
    assert "no estimate: the compile failed" in latency.detail
