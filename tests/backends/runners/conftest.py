"""Fixtures for the runner tests: a real model (cls_onnx, as the onnxruntime tests have it) and a real
sshd on 127.0.0.1 (free port, generated host key, one authorized key), started per test."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = Path("/usr/sbin/sshd")


@pytest.fixture(scope="session")
def cls_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """PP-OCR mobile text-direction classifier (from rapidocr-onnxruntime), imported with a fixed shape."""
    import importlib.util

    from backends.passes.importer import import_model

    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("rapidocr-onnxruntime is not installed")
    source = Path(spec.submodule_search_locations[0]) / "models" / "ch_ppocr_mobile_v2.0_cls_infer.onnx"
    model, _ = import_model(source, {"x": [1, 3, 48, 192]}, lambda _: None)
    path = tmp_path_factory.mktemp("cls") / "model.onnx"
    path.write_bytes(model.SerializeToString(deterministic=True))
    return path


@dataclass
class Sshd:
    port: int
    key: Path
    known_hosts: Path
    process: subprocess.Popen[bytes]
    user: str

    @property
    def url(self) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}"

    @property
    def options(self) -> list[str]:
        return [
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "LogLevel=ERROR",
        ]

    def env(self) -> dict[str, str]:
        return {
            "NPUCTL_SSH_KEY": str(self.key),
            "NPUCTL_SSH_OPTIONS": " ".join(self.options),
            "NPUCTL_SSH_PYTHON": sys.executable,
        }

    def sessions(self) -> list[int]:
        """pids of this sshd's per-connection children (only processes this fixture started)."""
        import psutil

        try:
            return [c.pid for c in psutil.Process(self.process.pid).children()]
        except psutil.NoSuchProcess:
            return []

    def kill_session_when_benchmarking(self, done: threading.Event, killed: list[int]) -> None:
        """Kills the session serving benchprog (a child of this sshd, which the test started), once, and
        the orphaned benchmark under it (also started by the test)."""
        import psutil

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not done.is_set():
            for pid in self.sessions():
                try:
                    tree = psutil.Process(pid).children(recursive=True)
                except psutil.NoSuchProcess:
                    continue
                bench = [p for p in tree if "benchprog.py" in _cmdline(p)]
                if bench:
                    time.sleep(0.5)
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    for proc in bench:
                        with contextlib.suppress(psutil.NoSuchProcess):
                            proc.kill()
                    return
            time.sleep(0.05)


def _cmdline(proc: object) -> str:
    import psutil

    try:
        return " ".join(proc.cmdline())  # type: ignore[attr-defined]
    except psutil.Error:
        return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _user() -> str:
    import getpass

    return getpass.getuser()


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    if not SSHD.exists():
        pytest.skip("sshd missing")
    d = tmp_path / "sshd"
    d.mkdir()
    os.chmod(d, 0o700)
    host_key, client_key = d / "host_key", d / "client_key"
    for key in (host_key, client_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (d / "authorized_keys").write_text(client_key.with_suffix(".pub").read_text())
    os.chmod(d / "authorized_keys", 0o600)
    port = _free_port()
    host_pub = host_key.with_suffix(".pub").read_text().split()
    known = d / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    config = d / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key}",
                f"AuthorizedKeysFile {d / 'authorized_keys'}",
                f"PidFile {d / 'sshd.pid'}",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PubkeyAuthentication yes",
                "PermitRootLogin prohibit-password",
                "StrictModes no",
                "UsePAM no",
                "Subsystem sftp internal-sftp",
                "ClientAliveInterval 5",
                "LogLevel ERROR",
                "",
            ]
        )
    )
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege separation directory
    proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            pytest.fail(f"sshd exited: {err}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.1)
    server = Sshd(port, client_key, known, proc, _user())
    try:
        yield server
    finally:
        for pid in server.sessions():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
