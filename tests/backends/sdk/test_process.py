"""backends.sdk.process: isolated Python argv, and one bounded run (output routing, the process group
killed on timeout, the errors a caller gets)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from backends.sdk import process
from backends.sdk.errors import TerminalError, TransientError


def _py(code: str) -> list[str]:
    return process.python_argv("-c", code)


def test_python_children_are_isolated_unless_they_keep_their_environment() -> None:
    assert process.python_argv("-m", "x") == [sys.executable, "-I", "-m", "x"]
    assert process.python_argv("a.py", interpreter="/venv/bin/python", keep_env=True) == [
        "/venv/bin/python",
        "-s",
        "-P",
        "a.py",
    ]
    assert process.script_argv(Path("/w/worker.py"), "req.json") == [
        sys.executable,
        "-I",
        "/w/worker.py",
        "req.json",
    ]


def test_without_a_log_both_streams_are_captured(tmp_path: Path) -> None:
    done = process.run(
        _py("import os, sys; print(os.getcwd()); print('oops', file=sys.stderr); sys.exit(3)"),
        "child",
        30,
        cwd=tmp_path,
    )
    assert (done.returncode, done.stdout.strip(), done.stderr.strip()) == (3, str(tmp_path), "oops")


def test_with_a_log_the_command_and_its_output_are_appended(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "stage.log"
    argv = _py("import sys; print('out'); print('err', file=sys.stderr)")
    done = process.run(argv, "child", 30, cwd=tmp_path, log=log, env={"PATH": "/usr/bin:/bin"})
    lines = log.read_text().splitlines()
    assert lines[0].startswith(f"$ cd {tmp_path} && {sys.executable} -I -c ")
    assert sorted(lines[1:]) == ["err", "out"] and done.stdout == ""


def test_a_child_answering_on_stdout_logs_only_its_stderr(tmp_path: Path) -> None:
    log = tmp_path / "native.log"
    done = process.run(
        _py("import sys; print('{}'); print('native', file=sys.stderr)"),
        "child",
        30,
        log=log,
        stdout_to_log=False,
    )
    assert done.stdout.strip() == "{}" and log.read_text() == "native\n"


def test_a_timeout_kills_the_whole_group_and_is_transient(tmp_path: Path) -> None:
    """The child starts a grandchild; both are gone when the timeout fires."""
    pid_file = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); print('started', flush=True); time.sleep(60)"
    )
    started = time.monotonic()
    with pytest.raises(process.TimedOut, match=r"^slow tool timed out after 2 s$") as info:
        process.run(_py(code), "slow tool", 2)
    assert isinstance(info.value, TransientError) and info.value.stdout.strip() == "started"
    assert time.monotonic() - started < 30
    assert not _alive(int(pid_file.read_text()))


def _alive(pid: int) -> bool:
    for _ in range(50):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            return False
        if state == "Z":  # killed, waiting for a reaper
            return False
        time.sleep(0.1)
    return True


def test_until_stops_the_group_once_the_log_holds_what_the_caller_needs(tmp_path: Path) -> None:
    """A library that logs its verdicts and then works on for a long time (QNN finalizing a graph):
    `until` ends the run once the line is written; the group (a grandchild too) is killed, what was
    logged stays, and the returncode is STOPPED. A child that ends first is not stopped."""
    log, pid_file = tmp_path / "native.log", tmp_path / "grandchild.pid"
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); "
        "print('verdicts', file=sys.stderr, flush=True); print('finalizing', file=sys.stderr, flush=True); "
        "time.sleep(600)"
    )
    seen = lambda: "finalizing" in log.read_text()  # noqa: E731
    done = process.run(_py(code), "lib", 300, log=log, stdout_to_log=False, until=seen)
    assert done.returncode == process.STOPPED
    assert log.read_text() == "verdicts\nfinalizing\n"
    assert not _alive(int(pid_file.read_text()))
    quick = process.run(_py("print('done')"), "lib", 300, until=lambda: False)
    assert quick.returncode == 0 and quick.stdout == "done\n"


def test_a_program_that_cannot_start_is_terminal(tmp_path: Path) -> None:
    with pytest.raises(TerminalError, match="cannot run /nonexistent/tool"):
        process.run(["/nonexistent/tool"], "tool", 5)
