"""backends.sdk.child_call: a named function in one long-lived child; errors keep their kind, a signal is named
and fails only that call, and the next call gets a fresh child."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.sdk.child_call import TEST_ONLY_SIGSEGV, Child, ChildHung, ChildKilled, Unloadable
from backends.sdk.errors import TerminalError, TransientError


@pytest.fixture
def child() -> Iterator[Child]:
    made = Child()
    yield made
    made.close()


def test_results_come_back_and_the_child_is_reused(child: Child, tmp_path: Path) -> None:
    log = tmp_path / "call.log"
    assert child.call("json:dumps", {"a": [1, 2]}, log, "test") == '{"a": [1, 2]}'
    first = child._proc.pid if child._proc else None
    assert child.call("os.path:basename", "/x/y.onnx", log, "test") == "y.onnx"
    assert child._proc is not None and child._proc.pid == first


def test_environment_and_folder_follow_the_caller(
    child: Child, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NPUCTL_CHILD_PROBE", "seen")
    monkeypatch.chdir(tmp_path)
    assert child.call("os:getenv", "NPUCTL_CHILD_PROBE", tmp_path / "l", "test") == "seen"
    assert child.call("os.path:abspath", ".", tmp_path / "l", "test") == str(tmp_path)


def test_errors_keep_their_kind_and_a_crash_is_named(
    child: Child, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "crash" / "compile.log"
    with pytest.raises(Unloadable):
        child.call("no_such_module_here:run", {}, log, "test")
    with pytest.raises(TerminalError, match=r"compile\.options must be a mapping"):
        child.call("backends.onnxruntime:validate_options", [1], log, "test")
    with pytest.raises(TransientError, match="crashed: JSONDecodeError"):
        child.call("json:loads", "{not json", log, "test")
    assert "Traceback" in log.read_text()  # the child's traceback is in the call's log
    monkeypatch.setenv(TEST_ONLY_SIGSEGV, "/crash/")
    with pytest.raises(ChildKilled, match=r"^onnxruntime child killed by SIGSEGV$"):
        child.call("json:dumps", 1, log, "onnxruntime")
    monkeypatch.delenv(TEST_ONLY_SIGSEGV)
    assert child.call("json:dumps", 2, log, "test") == "2"  # a fresh child
    assert os.path.exists(log)


def test_a_call_past_its_time_limit_kills_the_child_and_the_next_call_gets_a_fresh_one(
    child: Child, tmp_path: Path
) -> None:
    log = tmp_path / "hang.log"
    child.call("json:dumps", 0, log, "test")
    hung = child._proc
    with pytest.raises(ChildHung, match=r"^onnxruntime child did not answer within 0.5 s and was killed$"):
        child.call("time:sleep", 60, log, "onnxruntime", timeout_s=0.5)
    assert hung is not None and hung.poll() is not None  # killed, not left sleeping
    assert child.call("json:dumps", 3, log, "test", timeout_s=30) == "3"
