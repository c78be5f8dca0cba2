"""The ssh runner: benchprog on a device reached over ssh, with the system `ssh`/`scp` clients.

One run: make a temporary folder on the device, copy the job folder's files and the benchmark program
(benchprog.py + harness.py) into it, run it with the device's python, copy back the outputs file the
request names, remove the folder. Measurements are `measured:device`.

Connection problems are TransientErrors (the engine retries them): ssh exits 255 when the connection
fails or drops (the keep-alive options make a dead link visible within ~15 s), and a run past its
timeout is killed. benchprog's own failures map as for every runner (backends.runners.parse_result).

Settings that say how to reach the device, not what is measured, come from the environment:
NPUCTL_SSH_KEY (identity file), NPUCTL_SSH_OPTIONS (extra ssh options, shell-split),
NPUCTL_SSH_PYTHON (the device's interpreter, default python3).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends.runners import REQUEST_FILE, bench_files, parse_result
from backends.runners.url import RunnerUrlError
from backends.runners.url import parse as parse_url
from backends.sdk import process
from backends.sdk.errors import TerminalError, TransientError

CONNECTION_FAILED = 255
SETUP_TIMEOUT_S = 60.0


@dataclass
class SshRunner:
    user: str
    host: str
    port: int = 22
    key: str | None = None
    options: Sequence[str] = field(default_factory=tuple)
    python: str = "python3"
    name: str = "ssh"
    evidence: str = "measured:device"

    @classmethod
    def from_url(cls, url: str) -> SshRunner:
        """ssh://user@host[:port] (parsed strictly, backends.runners.url), with the reach settings from
        the environment."""
        try:
            parsed = parse_url(url)
        except RunnerUrlError as exc:
            raise TerminalError(f"evaluate.runner {exc}") from None
        if parsed.scheme != "ssh":
            raise TerminalError(f"evaluate.runner {url!r}: not an ssh:// URL")
        return cls(
            user=parsed.user,
            host=parsed.host,
            port=parsed.port,
            key=os.environ.get("NPUCTL_SSH_KEY") or None,
            options=tuple(shlex.split(os.environ.get("NPUCTL_SSH_OPTIONS", ""))),
            python=os.environ.get("NPUCTL_SSH_PYTHON", "python3"),
        )

    def describe(self) -> str:
        return f"ssh://{self.user}@{self.host}:{self.port}"

    # ------------------------------------------------------------ command construction

    def _common(self) -> list[str]:
        opts = [
            "-o", "BatchMode=yes",
            "-o", "ConnectTimeout=15",
            "-o", "ServerAliveInterval=5",
            "-o", "ServerAliveCountMax=3",
        ]  # fmt: skip
        if self.key:
            opts += ["-i", self.key, "-o", "IdentitiesOnly=yes"]
        return opts + list(self.options)

    def _destination(self) -> str:
        return f"{self.user}@{self.host}"

    def _scp_host(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user}@{host}"

    def ssh_command(self, remote: str) -> list[str]:
        """`--` ends the options: nothing after it (the destination) is ever read as one."""
        return ["ssh", "-p", str(self.port), *self._common(), "--", self._destination(), remote]

    def scp_to(self, files: Sequence[Path], remote_dir: str) -> list[str]:
        return [
            "scp",
            "-q",
            "-P",
            str(self.port),
            *self._common(),
            "--",
            *map(str, files),
            f"{self._scp_host()}:{remote_dir}/",
        ]

    def scp_from(self, remote_file: str, local: Path) -> list[str]:
        return [
            "scp",
            "-q",
            "-P",
            str(self.port),
            *self._common(),
            "--",
            f"{self._scp_host()}:{remote_file}",
            str(local),
        ]

    def bench_command(self, remote_dir: str, timeout_s: float | None = None) -> str:
        """The remote shell command; with a timeout the device bounds the run itself too (`timeout`, where
        the device has it), so a run orphaned by a dropped connection does not go on for ever."""
        run = f"{shlex.quote(self.python)} benchprog.py {REQUEST_FILE}"
        if timeout_s is not None:
            limit = int(timeout_s) + 5
            run = f"if command -v timeout >/dev/null 2>&1; then exec timeout -s KILL {limit} {run}; else exec {run}; fi"
        return f"cd {shlex.quote(remote_dir)} && {run}"

    # ------------------------------------------------------------ running

    def _call(
        self, argv: list[str], timeout_s: float, what: str, log: Path | None
    ) -> subprocess.CompletedProcess[str]:
        done = process.run(argv, f"{what} on {self.describe()}", timeout_s)
        stderr = done.stderr
        _append(log, stderr)
        if done.returncode == CONNECTION_FAILED:
            raise TransientError(
                f"ssh connection to {self.describe()} failed or dropped during {what}: {_tail(stderr)}"
            )
        return done

    def _checked(self, argv: list[str], timeout_s: float, what: str, log: Path | None) -> str:
        done = self._call(argv, timeout_s, what, log)
        if done.returncode != 0:
            raise TransientError(
                f"{what} on {self.describe()} failed (exit {done.returncode}): {_tail(done.stderr)}"
            )
        return done.stdout

    def run(self, job_dir: Path, timeout_s: float, log: Path | None = None) -> dict[str, Any]:
        request = json.loads((job_dir / REQUEST_FILE).read_text())
        remote_dir = self._checked(
            self.ssh_command("mktemp -d /tmp/npuctl-bench-XXXXXXXX"), SETUP_TIMEOUT_S, "mktemp", log
        ).strip()
        if not remote_dir.startswith("/tmp/npuctl-bench-"):
            raise TransientError(f"unexpected remote folder {remote_dir!r} on {self.describe()}")
        try:
            files = sorted(p for p in job_dir.iterdir() if p.is_file()) + bench_files()
            self._checked(
                self.scp_to(files, remote_dir), max(SETUP_TIMEOUT_S, timeout_s), "copy to device", log
            )
            done = self._call(
                self.ssh_command(self.bench_command(remote_dir, timeout_s)), timeout_s, "benchprog", log
            )
            result = parse_result(done.stdout, done.stderr, done.returncode, self.describe())
            outputs = request.get("outputs")
            if outputs:
                name = Path(str(outputs)).name
                self._checked(
                    self.scp_from(f"{remote_dir}/{name}", job_dir / name), SETUP_TIMEOUT_S, "copy back", log
                )
            return result
        finally:
            self._cleanup(remote_dir, log)

    def _cleanup(self, remote_dir: str, log: Path | None) -> None:
        try:
            self._call(self.ssh_command(f"rm -rf {shlex.quote(remote_dir)}"), SETUP_TIMEOUT_S, "cleanup", log)
        except TransientError as exc:
            _append(log, f"cleanup failed (ignored): {exc}")


def _tail(text: str, lines: int = 3) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept)[-600:] or "no message"


def _append(log: Path | None, text: str) -> None:
    if log is not None and text:
        with log.open("a") as fh:
            fh.write(text if text.endswith("\n") else text + "\n")
