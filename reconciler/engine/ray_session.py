"""Joining Ray for one run: npuctl's settings, the address checked before Ray is asked, and Ray's own
output kept off stdout.

npuctl sets Ray's settings, never the user's global configuration: usage statistics off, and for a
private cluster (`address="local"`) loopback only, no dashboard, its temp folder in the run's
`.npuctl/ray` (reached through a short symlink in /tmp when that path is too long for Ray's unix
sockets), `num_cpus` from `-j`, and token authentication with a token made for the run and passed in
the environment (Ray would otherwise write one to `~/.ray/auth_token`).

Loopback only: Ray's gcs_server binds 127.0.0.1 exactly when its node address is "127.0.0.1"
(`listen_to_localhost_only = node_ip_address == "127.0.0.1"`, gcs_server.cc), and so do the raylet
and the core workers (measured); any other address binds gRPC's wildcard, `::`. But
`ray.init(_node_ip_address="127.0.0.1")` goes through `services.resolve_ip_for_localhost`, which
swaps a loopback address for the machine's routable one unless `ray_constants.ENABLE_RAY_CLUSTER` is
false, a constant read once, when Ray is imported, from `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`. So for a
private cluster npuctl sets that variable to 0 before importing Ray (the processes Ray starts inherit
it) and checks afterwards that every node's address is loopback; if Ray was imported earlier with
the variable unset, the run warns instead of claiming loopback. The same swap would make an existing
cluster at a loopback address (`--address 127.0.0.1:6379`) unreachable, so it is set for that too.

An existing cluster's address is checked first with a gRPC handshake bounded by `CONNECT_S` (Ray's
own connect retries for about 20 s against a closed port and for ever against a server that is not
Ray's), and Ray's connect window is bounded by the same figure: an unreachable, refusing or
refusing-to-authenticate cluster is one line naming the address within seconds.

Ray prints worker-death notices on the driver's stdout whatever `log_to_driver` says
(`print_to_stdstream`, "(raylet) A worker died..."), and its C++ core logs on stderr: while Ray lives
in the process, file descriptor 1 points at stderr (`--json` output is printed after), and what Ray
prints while connecting goes to `.npuctl/ray/connect.log`, read for the reason when it fails.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

CONNECT_S = 5
"""How long joining an existing cluster may take before it is called unreachable."""
SOCKET_PATH_ROOM = 107 - len("/session_2026-12-02_01-45-33_123456_123456/sockets/plasma_store")
"""Ray's unix sockets live under its temp dir, and AF_UNIX paths are limited to 107 bytes."""
LOOPBACK = "127.0.0.1"
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""0 keeps Ray from replacing a loopback node address with a routable one (see the module docstring)."""
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
"""An HTTP/2 client's connection preface and an empty SETTINGS frame (RFC 9113, 3.4): a gRPC server
answers with its own SETTINGS frame."""
HTTP2_FRAME_HEAD = 9
HTTP2_SETTINGS = 4
"""The frame type at byte 3 of a frame header."""
LOG_PREFIX = re.compile(r"^\[[^\]]*\]\s*(\([a-z_]+\)\s*)?[\w.]+:\d+:\s*")
"""The head of a Ray C++ log line: `[time level pid tid] (process) file.cc:123: `."""


class Unreachable(Exception):
    """The cluster cannot be joined (or the private one started); `str(err)` is one line naming it."""


def on_loopback(address: str) -> bool:
    """A cluster address on this machine's loopback ("127.0.0.1:6379"): Ray would swap its host for
    the routable address too, and never reach a cluster that listens on loopback only."""
    host = address.rpartition(":")[0].strip("[]")
    return host in {"localhost", LOOPBACK, "::1"}


def probe(address: str, timeout_s: float = CONNECT_S) -> None:
    """Raises Unreachable unless a server at HOST:PORT answers an HTTP/2 handshake (Ray's GCS is a gRPC
    server) within `timeout_s`. Other address forms (`auto`, `ray://...`) and TLS are left to Ray."""
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit() or os.environ.get("RAY_USE_TLS", "0") != "0":
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as conn:
            conn.sendall(HTTP2_PREFACE)
            head = conn.recv(HTTP2_FRAME_HEAD)
    except TimeoutError:
        raise Unreachable(
            f"cannot reach the Ray cluster at {address}: no answer within {timeout_s:g} s"
        ) from None
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise Unreachable(f"cannot reach the Ray cluster at {address}: {why}") from None
    if len(head) < 4 or head[3] != HTTP2_SETTINGS:
        raise Unreachable(f"cannot reach the Ray cluster at {address}: the server there does not speak gRPC")


_FAILING = re.compile(r"fail(s|ed|ure)?", re.IGNORECASE)


def _reason(log: Path) -> str:
    """The last line Ray logged about failing, without its log prefix."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if _FAILING.search(ln)]
    return LOG_PREFIX.sub("", lines[-1])[:300] if lines else ""


class StdoutToStderr:
    """File descriptor 1 points at stderr until `restore()`."""

    def __init__(self) -> None:
        sys.stdout.flush()
        self._saved: int | None = os.dup(1)
        os.dup2(2, 1)

    def restore(self) -> None:
        if self._saved is None:
            return
        sys.stdout.flush()
        os.dup2(self._saved, 1)
        os.close(self._saved)
        self._saved = None


class Session:
    """Ray initialised for one run, and undone by `close()`."""

    def __init__(self, address: str, cpus: int, state_dir: Path, warn: Callable[[str], None] | None) -> None:
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
        private = address == "local"
        if private or on_loopback(address):
            os.environ[LOOPBACK_ENV] = "0"  # read when Ray is imported, and by every process it starts
        if private:
            os.environ["RAY_AUTH_MODE"] = "token"
            os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
        else:
            probe(address)
            os.environ.setdefault("RAY_gcs_server_port_wait_time_s", str(CONNECT_S))
        import ray

        self.ray: Any = ray
        self._alias: Path | None = None
        folder = state_dir.resolve() / "ray"
        folder.mkdir(parents=True, exist_ok=True)
        options: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "configure_logging": False,
        }
        if private:
            options.update(num_cpus=cpus, _temp_dir=str(self._short(folder)), _node_ip_address=LOOPBACK)
        self._stdout = StdoutToStderr()
        try:
            self._connect(address, options, folder / "connect.log")
        except BaseException:
            self.close()
            raise
        if private and warn is not None and not self._loopback_only():
            warn(
                f"the private Ray cluster listens beyond loopback: Ray was imported before npuctl "
                f"set {LOOPBACK_ENV}=0"
            )

    def _short(self, folder: Path) -> Path:
        """`folder`, or a short link to it when Ray's socket paths under it would be too long."""
        if len(str(folder)) <= SOCKET_PATH_ROOM:
            return folder
        self._alias = Path(tempfile.mkdtemp(prefix="npuctl-ray-", dir="/tmp"))
        (self._alias / "r").symlink_to(folder, target_is_directory=True)
        return self._alias / "r"

    def _connect(self, address: str, options: dict[str, Any], log: Path) -> None:
        """ray.init with what Ray prints meanwhile in `log`; Unreachable, naming the address, if it fails."""
        ray = self.ray
        with log.open("wb") as out:
            saved = os.dup(2)
            os.dup2(out.fileno(), 2)
            try:
                ray.init(address=address, **options)
            except (ConnectionError, RuntimeError, ray.exceptions.RayError) as exc:
                why = _reason(log) or str(exc)
                if address == "local":
                    raise Unreachable(f"cannot start a private Ray cluster (log: {log}): {why}") from None
                raise Unreachable(f"cannot reach the Ray cluster at {address}: {why}") from None
            finally:
                os.dup2(saved, 2)
                os.close(saved)

    def _loopback_only(self) -> bool:
        return all(node["NodeManagerAddress"] == LOOPBACK for node in self.ray.nodes())

    def close(self) -> None:
        try:
            self.ray.shutdown()
        finally:
            self._stdout.restore()
            if self._alias is not None:
                shutil.rmtree(self._alias, ignore_errors=True)  # the link only; the folder stays
