"""A remote runner's interpreter is in evaluate's key: changing the device's python re-measures."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.catalog import targets
from reconciler.engine import keys
from reconciler.engine.chain import build_chain, variants
from reconciler.spec import check
from reconciler.state.db import Database
from reconciler.state.hashcache import FileHasher


def _evaluate_key(repo: Path) -> str:
    [report] = check([repo / "specs" / "digits.yaml"], repo)
    assert report.valid, report.errors
    spec = report.spec
    db = Database(repo / ".npuctl" / "state.db")
    try:
        chain = build_chain(spec, variants(spec)[0], repo, FileHasher(db))
    finally:
        db.close()
    [evaluate] = [s for s in chain if s.stage.name == "evaluate"]
    return keys.digest(evaluate.key_inputs(targets()[spec.target]))


def test_ssh_interpreter_changes_the_evaluate_key(digits_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = digits_repo / "specs" / "digits.yaml"
    local = _evaluate_key(digits_repo)
    monkeypatch.setenv("NPUCTL_SSH_PYTHON", "/opt/py-a/bin/python3")
    assert _evaluate_key(digits_repo) == local, "the local runner is not affected by ssh settings"
    spec.write_text(
        spec.read_text().replace("    warmup: 1\n", "    warmup: 1\n    runner: ssh://pi@board\n")
    )
    first = _evaluate_key(digits_repo)
    assert first != local
    monkeypatch.setenv("NPUCTL_SSH_PYTHON", "/opt/py-b/bin/python3")
    assert _evaluate_key(digits_repo) != first
