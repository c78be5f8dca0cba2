"""The private Ray cluster npuctl starts (`--executor ray`, address `local`) listens on loopback only:
every listening TCP socket of every process of the cluster, read from the kernel, is on 127.0.0.1 or
::1 (an IPv6 socket bound to ::ffff:127.0.0.1 is loopback too). Its usage statistics are off and its
session folder is inside the run's state folder: npuctl's settings, not the user's Ray configuration."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from backends.sdk.process import python_argv

CLUSTER = """\
import os, sys
from pathlib import Path
from reconciler.engine.ray_executor import RayExecutor

executor = RayExecutor("local", 1, Path(sys.argv[1]), warn=lambda m: print("warning:", m, flush=True))
ray = executor.ray


def pid():
    return os.getpid()


print("pid", ray.get(ray.remote(num_cpus=0)(pid).remote()), flush=True)  # a started worker
from ray._common.usage import usage_lib

print("usage_stats", usage_lib.usage_stats_enabled(), flush=True)
print("session", ray._private.worker._global_node.get_session_dir_path(), flush=True)
sys.stdin.readline()
executor.close()
print("closed", flush=True)
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
    child = subprocess.Popen(
        [*python_argv(str(script), interpreter=sys.executable), str(tmp_path / "state")],
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "1"},  # the user's own setting: npuctl's wins
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
