"""backends.sdk.worker.run_worker: a worker script under a venv interpreter (here the running one), its
request and result files, and every way it can end translated into a stage error."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from backends.sdk.errors import TerminalError, TransientError
from backends.sdk.worker import base_env, run_worker

HEAD = """import json, os, signal, sys
request = json.load(open(sys.argv[1]))
def answer(result):
    json.dump(result, open(sys.argv[2], "w"))
"""


def _worker(tmp_path: Path, body: str) -> Path:
    """A worker script in a folder named "fake" (its request file: fake-request.json)."""
    script = tmp_path / "fake" / "worker.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(HEAD + body)
    return script


def _run(tmp_path: Path, body: str, request: dict | None = None, **kw: object) -> dict:
    job = tmp_path / "job"
    options: dict = {"tool": "faketool", "timeout_s": 60, "env": base_env(job), **kw}
    return run_worker(
        Path(sys.executable),
        _worker(tmp_path, body),
        request or {"x": 1},
        job,
        tmp_path / "stage.log",
        **options,
    )


def test_the_result_comes_back_and_the_request_is_written_as_given(tmp_path: Path) -> None:
    body = "print('working'); answer({'ok': True, 'got': request, 'home': os.environ['HOME']})\n"
    result = _run(tmp_path, body, {"b": [1, 2], "a": "x"})
    job = tmp_path / "job"
    assert result == {"ok": True, "got": {"a": "x", "b": [1, 2]}, "home": str(job)}
    assert json.loads((job / "fake-request.json").read_text()) == {"a": "x", "b": [1, 2]}
    log = (tmp_path / "stage.log").read_text().splitlines()
    assert log[0].startswith(f"$ cd {job} && ") and "working" in log


def test_a_reported_failure_is_terminal_with_the_step_and_the_log_tail(tmp_path: Path) -> None:
    body = (
        "print('the tool explains'); answer({'ok': False, 'step': 'build', 'error': 'bad op'}); sys.exit(3)\n"
    )
    with pytest.raises(TerminalError) as info:
        _run(tmp_path, body)
    lines = str(info.value).splitlines()
    assert lines[0] == "faketool build failed: bad op" and lines[-1] == "the tool explains"


@pytest.mark.parametrize(
    ("body", "kind", "how"),
    [
        ("os.abort()\n", TerminalError, "aborted (SIGABRT)"),
        ("os.kill(os.getpid(), signal.SIGSEGV)\n", TerminalError, "aborted (SIGSEGV)"),
        ("sys.exit(134)\n", TerminalError, "exited with 134 (abort)"),
        ("os.kill(os.getpid(), signal.SIGKILL)\n", TransientError, "killed by SIGKILL"),
        ("print('half done'); sys.exit(1)\n", TransientError, "exited with 1 without a result"),
        ("answer({'ok': True}); sys.exit(1)\n", TransientError, "exited with 1 without a result"),
    ],
)
def test_an_end_without_a_result_is_terminal_only_when_it_crashed_on_its_input(
    tmp_path: Path, body: str, kind: type, how: str
) -> None:
    with pytest.raises(kind) as info:
        _run(tmp_path, body)
    assert type(info.value) is kind
    assert str(info.value).startswith(f"faketool {how}; last log lines:")


def test_a_crash_names_the_step_the_worker_said_it_was_running(tmp_path: Path) -> None:
    """A worker writes `{"running": ...}` before a step its toolchain may crash in (TF's calibrator
    on a loop): the SIGSEGV's message names that step, still terminal; a result written after it wins."""
    body = "answer({'running': 'the int8 calibration'}); os.kill(os.getpid(), signal.SIGSEGV)\n"
    with pytest.raises(TerminalError) as info:
        _run(tmp_path, body)
    assert str(info.value).startswith(
        "faketool aborted (SIGSEGV) during the int8 calibration; last log lines:"
    )
    body = "answer({'running': 'the int8 calibration'}); answer({'ok': True, 'done': 1})\n"
    assert _run(tmp_path, body) == {"ok": True, "done": 1}


def test_a_hang_is_transient(tmp_path: Path) -> None:
    with pytest.raises(TransientError, match=r"faketool timed out after 1 s"):
        _run(tmp_path, "import time; time.sleep(60)\n", timeout_s=1)


def test_a_stale_result_is_never_read(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "fake-result.json").write_text(json.dumps({"ok": True, "stale": True}))
    with pytest.raises(TransientError, match="exited with 1 without a result"):
        _run(tmp_path, "sys.exit(1)\n")


def test_a_reproducible_worker_runs_as_a_copy_with_its_environment_and_no_aslr(tmp_path: Path) -> None:
    body = (
        "answer({'ok': True, 'argv': sys.argv, 'seed': os.environ.get('PYTHONHASHSEED'), "
        "'personality': open('/proc/self/personality').read().strip()})\n"
    )
    job = tmp_path / "job"
    env = {**base_env(job), "PYTHONHASHSEED": "0"}
    result = _run(tmp_path, body, env=env, reproducible=True)
    assert result["argv"] == ["worker.py", "fake-request.json", "fake-result.json"]
    assert (job / "worker.py").read_text() == (tmp_path / "fake" / "worker.py").read_text()
    assert result["seed"] == "0"
    assert int(result["personality"], 16) & 0x0040000


def test_a_plain_worker_runs_isolated_by_path(tmp_path: Path) -> None:
    body = "answer({'ok': True, 'argv0': sys.argv[0], 'isolated': sys.flags.isolated})\n"
    result = _run(tmp_path, body)
    assert result == {"ok": True, "argv0": str(tmp_path / "fake" / "worker.py"), "isolated": 1}
