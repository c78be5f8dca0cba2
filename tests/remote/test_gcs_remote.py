"""The remote cache on gs://: fake-gcs-server (a GCS API emulator, not GCS) on 127.0.0.1, started by
the test, and npuctl run by the dedicated gcsfs interpreter (tests/remote/gcs_env.py). A developer
clone applies and pushes; a fresh clone builds nothing and writes the same lock files; a flipped byte
on the emulator is caught and rebuilt."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, git
from tests.remote import gcs_env as env
from tests.remote.conftest import GCS, clone, commit, digits_specs, gcs_env, lock_bytes, lock_digests, stored

pytestmark = pytest.mark.slow


def npuctl_gcs(
    python: Path, cwd: Path, *args: str, extra: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """The command line under the gcsfs interpreter (npuctl from this checkout)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NPUCTL_REMOTE", "FSSPEC_", "STORAGE_"))}
    base.pop("PYTHONPATH", None)
    full_env = {**base, "CI": "1", "NPUCTL_RETRY_BASE_S": "0.05", **extra}
    return subprocess.run(
        [str(python), "-m", "reconciler", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _actions(result: subprocess.CompletedProcess[str]) -> dict[tuple[str, str], str]:
    specs = json.loads(result.stdout)["specs"]
    return {(spec["name"], s["name"]): s["action"] for spec in specs for s in spec["stages"]}


def test_gs_remote_fresh_clone_builds_nothing_and_a_flipped_byte_is_rebuilt(
    gcs_emulator: GCS, tmp_path: Path
) -> None:
    python = env.overlay(ROOT, tmp_path / "venv")
    url = f"gs://{gcs_emulator.bucket}/cache"
    machine = {**gcs_env(gcs_emulator), "NPUCTL_REMOTE": url}
    dev = tmp_path / "dev"
    dev.mkdir()
    git(dev, "init", "-q", "-b", "main")
    (dev / ".gitignore").write_text(".npuctl/\n")
    (dev / "specs").mkdir()
    digits_specs(dev, 2)
    applied = npuctl_gcs(python, dev, "apply", "--json", extra=machine)
    assert applied.returncode == 0, applied.stderr
    assert "warning" not in applied.stderr, applied.stderr
    assert "built" in _actions(applied).values()  # the second spec reuses the shared stages
    commit(dev)
    pushed = npuctl_gcs(python, dev, "push", "--json", extra=machine)
    assert pushed.returncode == 0, pushed.stderr
    report = json.loads(pushed.stdout)
    assert report["done"] == [] and len(report["present"]) == 3 + 2  # apply pushed every build
    assert len(gcs_emulator.names("cache/records/")) == 5
    objects = {
        n.removeprefix("cache/objects/").replace("/", "") for n in gcs_emulator.names("cache/objects/")
    }
    assert lock_digests(dev) <= objects

    fresh = clone(dev, tmp_path / "fresh")
    again = npuctl_gcs(python, fresh, "apply", "--json", extra=machine)
    assert again.returncode == 0, again.stderr
    assert set(_actions(again).values()) == {"cached"}  # 0 stages built
    assert lock_digests(dev) <= stored(fresh)  # every artifact downloaded
    assert lock_bytes(fresh) == lock_bytes(dev)

    # One byte of the compiled model flipped on the emulator, through the GCS API.
    compile_stage = json.loads((dev / "specs" / "digits-0.lock.json").read_text())["variants"]["default"][
        "stages"
    ]["compile"]
    digest = next(iter(compile_stage["artifacts"].values()))["digest"]
    name = f"cache/objects/{digest[:2]}/{digest[2:]}"
    data = bytearray(gcs_emulator.get(name))
    data[len(data) // 2] ^= 0x40
    gcs_emulator.put(name, bytes(data))
    assert hashlib.sha256(gcs_emulator.get(name)).hexdigest() != digest

    # The committed configuration this time: its `token: anon` names a method, not a credential.
    second = clone(dev, tmp_path / "second")
    (second / ".npuctl.yaml").write_text(f"remote:\n  url: {url}\n  options: {{token: anon}}\n")
    committed = {k: v for k, v in gcs_env(gcs_emulator).items() if k != "FSSPEC_GS"}
    rebuilt = npuctl_gcs(python, second, "apply", "--json", extra=committed)
    assert rebuilt.returncode == 0, rebuilt.stderr
    warnings = [line for line in rebuilt.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and f"object {digest[:12]} does not verify" in warnings[0], rebuilt.stderr
    actions = _actions(rebuilt)
    assert actions[("digits-0", "compile")] == "built"
    assert actions[("digits-0", "evaluate")] == "cached"  # same compiled bytes: early cutoff
    assert lock_bytes(second) == lock_bytes(dev)
    assert digest in stored(second)
    repaired = gcs_emulator.get(name)
    assert hashlib.sha256(repaired).hexdigest() == digest  # the rebuild's push replaced the bad copy
