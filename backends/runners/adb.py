"""The adb runner: the same protocol as ssh over Android Debug Bridge (`adb -s SERIAL`).

push the job files and the benchmark program to a folder under /data/local/tmp, run benchprog with the
device's python (NPUCTL_ADB_PYTHON, e.g. a Termux or a bundled interpreter), pull the outputs back,
remove the folder. Measurements are `measured:device`. adb exits non-zero when the device is gone
("device offline", "no devices/emulators found"): those are TransientErrors; a missing adb binary is a
TerminalError naming what to install.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.runners import REQUEST_FILE, bench_files, parse_result
from backends.runners.url import RunnerUrlError
from backends.runners.url import parse as parse_url
from backends.sdk import process
from backends.sdk.errors import TerminalError, TransientError

SETUP_TIMEOUT_S = 120.0
_DEVICE_GONE = ("device offline", "no devices", "device not found", "device unauthorized", "closed")


@dataclass
class AdbRunner:
    serial: str
    python: str = "python3"
    adb: str = "adb"
    base_dir: str = "/data/local/tmp"
    name: str = "adb"
    evidence: str = "measured:device"

    @classmethod
    def from_url(cls, url: str) -> AdbRunner:
        try:
            parsed = parse_url(url)
        except RunnerUrlError as exc:
            raise TerminalError(f"evaluate.runner {exc}") from None
        if parsed.scheme != "adb":
            raise TerminalError(f"evaluate.runner {url!r}: not an adb:// URL")
        return cls(
            serial=parsed.host,
            python=os.environ.get("NPUCTL_ADB_PYTHON", "python3"),
            adb=os.environ.get("NPUCTL_ADB", "adb"),
        )

    def describe(self) -> str:
        return f"adb://{self.serial}"

    def remote_dir(self, job_dir: Path) -> str:
        return f"{self.base_dir}/npuctl-bench-{job_dir.name}"

    # ------------------------------------------------------------ command construction

    def _base(self) -> list[str]:
        return [self.adb, "-s", self.serial]

    def mkdir_command(self, remote_dir: str) -> list[str]:
        return [*self._base(), "shell", f"mkdir -p {shlex.quote(remote_dir)}"]

    def push_command(self, files: Sequence[Path], remote_dir: str) -> list[str]:
        return [*self._base(), "push", *map(str, files), f"{remote_dir}/"]

    def bench_command(self, remote_dir: str) -> list[str]:
        inner = f"cd {shlex.quote(remote_dir)} && {shlex.quote(self.python)} benchprog.py {REQUEST_FILE}; echo __rc=$?"
        return [*self._base(), "shell", inner]

    def pull_command(self, remote_file: str, local: Path) -> list[str]:
        return [*self._base(), "pull", remote_file, str(local)]

    def cleanup_command(self, remote_dir: str) -> list[str]:
        return [*self._base(), "shell", f"rm -rf {shlex.quote(remote_dir)}"]

    # ------------------------------------------------------------ running

    def _call(
        self, argv: list[str], timeout_s: float, what: str, log: Path | None
    ) -> subprocess.CompletedProcess[str]:
        if shutil.which(argv[0]) is None and not Path(argv[0]).is_file():
            raise TerminalError(
                f"adb not installed: install Android platform-tools (adb) to use {self.describe()}"
            )
        proc = process.run(argv, f"{what} on {self.describe()}", timeout_s)
        stdout, stderr = proc.stdout, proc.stderr
        if log is not None and stderr:
            with log.open("a") as fh:
                fh.write(stderr)
        if proc.returncode != 0:
            text = (stderr or stdout).strip().splitlines()
            message = text[-1] if text else f"exit {proc.returncode}"
            raise TransientError(f"adb {what} on {self.describe()} failed: {message}")
        return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)

    def run(self, job_dir: Path, timeout_s: float, log: Path | None = None) -> dict[str, Any]:
        request = json.loads((job_dir / REQUEST_FILE).read_text())
        remote = self.remote_dir(job_dir)
        self._call(self.mkdir_command(remote), SETUP_TIMEOUT_S, "mkdir", log)
        try:
            files = sorted(p for p in job_dir.iterdir() if p.is_file()) + bench_files()
            self._call(self.push_command(files, remote), max(SETUP_TIMEOUT_S, timeout_s), "push", log)
            done = self._call(self.bench_command(remote), timeout_s, "benchprog", log)
            stdout, rc = split_rc(done.stdout)
            result = parse_result(stdout, done.stderr, rc, self.describe())
            outputs = request.get("outputs")
            if outputs:
                name = Path(str(outputs)).name
                self._call(
                    self.pull_command(f"{remote}/{name}", job_dir / name), SETUP_TIMEOUT_S, "pull", log
                )
            return result
        finally:
            with contextlib.suppress(TransientError, TerminalError):
                self._call(self.cleanup_command(remote), SETUP_TIMEOUT_S, "cleanup", log)


def split_rc(stdout: str) -> tuple[str, int]:
    """`adb shell` loses the remote exit code on old devices: the command echoes it as a last line."""
    lines = stdout.rstrip("\n").splitlines()
    if lines and lines[-1].startswith("__rc="):
        try:
            return "\n".join(lines[:-1]), int(lines[-1].removeprefix("__rc="))
        except ValueError:
            pass
    return stdout, 0 if stdout.strip() else 1
