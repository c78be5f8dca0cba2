"""Joining Ray. The private cluster npuctl starts (`--executor ray`, address `local`) listens on loopback
only: every listening TCP socket of every process of the cluster, read from the kernel, is on 127.0.0.1
or ::1 (an IPv6 socket bound to ::ffff:127.0.0.1 is loopback too). Its usage statistics are off, its
session folder is inside the run's state folder and its token is the run's own: npuctl's settings, not
the user's Ray configuration (nothing is written to ~/.ray). An address where no Ray cluster answers
fails the run in one line naming it, within seconds."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from backends.sdk.process import python_argv
from reconciler.engine.ray_session import CONNECT_S
from tests.conftest import run_npuctl

CLUSTER = """\
import os, sys
from pathlib import Path
from reconciler.engine.ray_executor import RayExecutor

out = os.fdopen(os.dup(1), "w")  # the executor points fd 1 at stderr while Ray lives
executor = RayExecutor("local", 1, Path(sys.argv[1]), warn=lambda m: print("warning:", m, file=out, flush=True))
ray = executor.ray


def pid():
    return os.getpid()


print("pid", ray.get(ray.remote(num_cpus=0)(pid).remote()), file=out, flush=True)  # a started worker
from ray._common.usage import usage_lib

print("usage_stats", usage_lib.usage_stats_enabled(), file=out, flush=True)
print("session", ray._private.worker._global_node.get_session_dir_path(), file=out, flush=True)
print("home", sorted(os.listdir(os.path.expanduser("~"))), file=out, flush=True)
sys.stdin.readline()
executor.close()
print("closed", file=out, flush=True)
"""


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def _listening(root: psutil.Process) -> list[tuple[int, str, str, int]]:
    """(pid, process name, address, port) of every listening TCP socket of `root` and its descendants."""
    found = []
    for process in [root, *root.children(recursive=True)]:
        try:
            for conn in process.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((process.pid, process.name(), conn.laddr.ip, conn.laddr.port))
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.mark.slow
def test_the_private_cluster_listens_on_loopback_only(tmp_path: Path) -> None:
    script = tmp_path / "cluster.py"
    script.write_text(CLUSTER)
    home = tmp_path / "home"
    home.mkdir()
    child = subprocess.Popen(
        [*python_argv(str(script), interpreter=sys.executable), str(tmp_path / "state")],
        # the user's own settings: npuctl's win; a home of its own shows what Ray would write there
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "1", "HOME": str(home)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        line = child.stdout.readline()
        assert line.startswith("pid "), line
        worker = int(line.split()[1])
        usage, session = child.stdout.readline().split(), child.stdout.readline().split(maxsplit=1)
        assert usage == ["usage_stats", "False"], usage  # npuctl turned them off, not the user's config
        assert Path(session[1].strip()).resolve().is_relative_to((tmp_path / "state").resolve()), session
        assert child.stdout.readline().split() == ["home", "[]"]  # no ~/.ray/auth_token
        sockets = _listening(psutil.Process(child.pid))
        names = {name for _, name, _, _ in sockets}
        assert "gcs_server" in names and "raylet" in names, sockets  # the cluster's servers were seen
        assert worker in {pid for pid, _, _, _ in sockets}, sockets  # and a worker's core-worker server
        assert all(_loopback(ip) for _, _, ip, _ in sockets), sockets
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline() == "closed\n"
    finally:
        child.kill() if child.poll() is None else None
        child.wait(timeout=60)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _one_line_naming(done: subprocess.CompletedProcess[str], address: str) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and done.stdout == "", done
    assert len(lines) == 1 and address in lines[0] and "internal error" not in lines[0], lines
    return lines[0]


def test_a_closed_port_is_one_line_naming_the_address(git_repo: Path) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    done = run_npuctl(git_repo, "apply", "--json", "--executor", "ray", "--address", address, timeout=60)
    assert "refused" in _one_line_naming(done, address)


def test_a_server_that_is_not_ray_is_one_line_within_the_connect_window(git_repo: Path) -> None:
    """A real TCP server on 127.0.0.1 that accepts and never answers: Ray alone would wait for ever."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        done = run_npuctl(git_repo, "apply", "--json", "--executor", "ray", "--address", address, timeout=60)
    assert f"no answer within {CONNECT_S} s" in _one_line_naming(done, address)
