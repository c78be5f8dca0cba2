"""The RKNN driver: a build the toolkit's own graph optimizer breaks in a fusion rule it names is made
again with that rule disabled, as the toolkit suggests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backends.rknn import driver
from backends.sdk.errors import TerminalError

TOLD = """\
W You can add disable_rules=['fuse_exmatmul_add_mul_exsoftmax13_exmatmul_to_sdpa'] in rknn.config() to temporarily disable the error rule!
E build: Traceback (most recent call last):
  File "rknn/api/rules/matmul.py", line 1539, in rknn.api.rules.matmul._p_fuse_exmatmul_add_mul_exsoftmax13_exmatmul_to_sdpa
IndexError: list index out of range
"""
"""rknn-toolkit2 2.5.0's own lines on PP-OCRv6's recognizer (rapidocr 3.10.0), from a real build's log."""


def test_the_rules_the_toolkit_names_are_read_from_its_log() -> None:
    assert driver.suggested_rules(TOLD) == {"fuse_exmatmul_add_mul_exsoftmax13_exmatmul_to_sdpa"}
    two = "disable_rules=['a_rule', 'b.rule'] in rknn.config() ... disable_rules=['c'] in rknn.config()"
    assert driver.suggested_rules(two) == {"a_rule", "b.rule", "c"}
    assert driver.suggested_rules("E build: IndexError: list index out of range") == set()


def _toolkit_standin(log: Path, fails_unless: set[str], calls: list[dict[str, Any]]) -> Any:
    """Stands in for one toolkit build process (named so): fails with the toolkit's own lines until the
    rules it names are disabled."""

    def run_once(
        request: dict[str, Any], job: Path, log_: Path, after: Any, timeout: float
    ) -> dict[str, Any]:
        calls.append(request["config"])
        if not fails_unless <= set(request["config"].get("disable_rules") or []):
            with log.open("a") as fh:
                fh.write(TOLD)
            raise TerminalError(
                "rknn-toolkit2 python failed: ValueError: IndexError: list index out of range"
            )
        return {"ok": True, "rknn": {"file": "model.rknn"}}

    return run_once


def test_a_build_broken_in_a_named_rule_is_made_again_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "compile.log"
    calls: list[dict[str, Any]] = []
    rule = {"fuse_exmatmul_add_mul_exsoftmax13_exmatmul_to_sdpa"}
    monkeypatch.setattr(driver, "_run_once", _toolkit_standin(log, rule, calls))
    result = driver.run({"config": {"target_platform": "rk3588"}}, tmp_path, log)
    assert result["disabled_rules"] == sorted(rule)
    assert [c.get("disable_rules") for c in calls] == [None, sorted(rule)]
    assert "building again with rknn.config(disable_rules=" in log.read_text()


def test_a_failure_the_toolkit_names_no_rule_for_is_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "compile.log"
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(driver, "_run_once", _toolkit_standin(log, {"never_named"}, calls))
    with pytest.raises(TerminalError):
        driver.run({"config": {"target_platform": "rk3588"}}, tmp_path, log)
    # the first failure names a rule (retried once with it disabled); the second names nothing new
    assert len(calls) == 2
