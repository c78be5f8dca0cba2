"""The dedicated interpreter the gs:// remote test runs npuctl with: a venv over the shared one
(`--system-site-packages`) holding gcsfs and the Google client stack it pulls (google-cloud-storage,
grpcio, ...), so none of that, nor another fsspec, lands in the shared interpreter beside s3fs.

Created when missing or when its pins change (by `.ci/setup`, or by the test on a clean machine). It
holds no npuctl, so one env serves every checkout: `overlay` makes a throwaway venv whose `.pth` puts
the checkout under test, then this env, on the path. A `.pth` (not PYTHONPATH) because npuctl starts
its children with `python -I`, which ignores PYTHON* variables but still reads site-packages.

    python -m tests.remote.gcs_env      # create it if needed, print its interpreter
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

ENV = Path.home() / ".cache" / "npuctl" / "test-envs" / "gcs"
PINS = ("gcsfs==2026.10.1", "fsspec==2026.9.0")
"""gcsfs 2026.10.1 asks for fsspec>=2026.9.0; 2026.9.0 is also s3fs's pin, so the venv's fsspec is the
shared one's version (pinned here so the env cannot drift from it)."""
_MARKER = ENV / "npuctl-pins.txt"


def python() -> Path:
    return ENV / "bin" / "python"


def ensure() -> Path:
    """The env's interpreter, creating the env first if it is missing or its pins changed."""
    wanted = "\n".join(PINS) + "\n"
    if _MARKER.is_file() and _MARKER.read_text() == wanted and python().exists():
        return python()
    ENV.parent.mkdir(parents=True, exist_ok=True)
    with open(ENV.parent / "gcs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test workers on a clean machine build it once
        if _MARKER.is_file() and _MARKER.read_text() == wanted and python().exists():
            return python()
        shutil.rmtree(ENV, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(ENV)], check=True)
        subprocess.run(
            [str(python()), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PINS],
            check=True,
        )
        _MARKER.write_text(wanted)  # last: a half-built env is rebuilt next time
    return python()


def _site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def overlay(checkout: Path, where: Path) -> Path:
    """An interpreter at `where` that imports npuctl from `checkout` and gcsfs from the env."""
    ensure()
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(where)], check=True
    )
    paths = [checkout.resolve(), _site_packages(ENV)]
    (_site_packages(where) / "npuctl-gcs-test.pth").write_text("".join(f"{p}\n" for p in paths))
    return where / "bin" / "python"


if __name__ == "__main__":
    print(ensure())
