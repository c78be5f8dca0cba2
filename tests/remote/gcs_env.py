"""The dedicated interpreter the gs:// remote test runs npuctl with: a venv over the interpreter that
runs the tests (its packages imported after the env's own, tests/nested_venv.py) holding gcsfs and the
Google client stack it pulls (google-cloud-storage, grpcio, ...), so none of that, nor another fsspec,
lands in the test interpreter beside s3fs.

One env per test interpreter (its folder is named for that interpreter's prefix), created when missing
or when its pins or the folders it imports from change (by `.ci/setup`, or by the test on a clean
machine). It holds no npuctl, so one env serves every checkout: `overlay` makes a throwaway venv whose
`.pth` puts the checkout under test, then this env, on the path.

    python -m tests.remote.gcs_env      # create it if needed, print its interpreter
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from tests import nested_venv

ENV = (
    Path.home()
    / ".cache"
    / "npuctl"
    / "test-envs"
    / f"gcs-{hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]}"
)
PINS = ("gcsfs==2026.10.1", "fsspec==2026.9.0")
"""gcsfs 2026.10.1 asks for fsspec>=2026.9.0; 2026.9.0 is also s3fs's pin, so the venv's fsspec is the
shared one's version (pinned here so the env cannot drift from it)."""
_MARKER = ENV / "npuctl-pins.txt"


def python() -> Path:
    return ENV / "bin" / "python"


def ensure() -> Path:
    """The env's interpreter, creating the env first if it is missing or its pins changed."""
    wanted = "".join(f"{line}\n" for line in (*PINS, sys.prefix, *map(str, nested_venv.site_folders())))
    if _MARKER.is_file() and _MARKER.read_text() == wanted and python().exists():
        return python()
    ENV.parent.mkdir(parents=True, exist_ok=True)
    with open(ENV.parent / f"{ENV.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test workers on a clean machine build it once
        if _MARKER.is_file() and _MARKER.read_text() == wanted and python().exists():
            return python()
        shutil.rmtree(ENV, ignore_errors=True)
        nested_venv.create(ENV)
        subprocess.run(
            [str(python()), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PINS],
            check=True,
        )
        _MARKER.write_text(wanted)  # last: a half-built env is rebuilt next time
    return python()


def overlay(checkout: Path, where: Path) -> Path:
    """An interpreter at `where` that imports npuctl from `checkout`, then gcsfs from the env, then the
    test interpreter's packages (through the env's own `.pth`)."""
    ensure()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    pth = nested_venv.pth_lines([checkout.resolve()], [nested_venv.site_packages(ENV)])
    (nested_venv.site_packages(where) / "npuctl-gcs-test.pth").write_text(pth)
    return where / "bin" / "python"


if __name__ == "__main__":
    print(ensure())
