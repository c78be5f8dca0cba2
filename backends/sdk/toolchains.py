"""Managed virtual environments for toolchains whose pins conflict with the main stack.

rknn-toolkit2 pins numpy<=1.26.4 and onnx<=1.18 (the main stack runs numpy 2 and onnx 1.23), so it
lives in its own venv, driven as a subprocess. A venv is created in a temporary folder beside its
final place and renamed into place only when every package installed and the toolchain imported, so
an interrupted install never leaves a half-built environment that looks usable. A completed venv holds
`npuctl-toolchain.json`: the installed distribution versions (read from the venv's dist-info folders,
never by importing), which are the toolchain's fingerprint.

Location: `$NPUCTL_TOOLCHAINS/<name>-<version>`, default `~/.cache/npuctl/toolchains/<name>-<version>`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from backends.sdk.process import NEUTRAL_CWD, python_argv, run

MARKER = "npuctl-toolchain.json"
MARKER_FORMAT = 1
Logger = Callable[[str], None]


@dataclass(frozen=True)
class Toolchain:
    """A pinned environment: `requirements` install with their dependencies, `no_deps` without."""

    name: str
    version: str
    requirements: tuple[str, ...]
    no_deps: tuple[str, ...]
    check_import: str
    """A module the finished venv must import (run in the venv, once, at install time)."""
    fingerprint_dists: tuple[str, ...]
    """Distributions whose versions are the fingerprint (the toolchain and what changes its output)."""
    install_hint: str
    notes: tuple[str, ...] = field(default=())

    @property
    def dirname(self) -> str:
        return f"{self.name}-{self.version}"


RKNN = Toolchain(
    name="rknn",
    version="2.5.0",
    # The toolkit's own pins (numpy<=1.26.4, onnx<=1.18, protobuf<=4.25.4) with exact versions, the
    # CPU build of torch 2.13.0 (the only torch on this machine's local disk: any other version pulls
    # gigabytes of CUDA wheels) and setuptools<81 (the toolkit imports pkg_resources).
    requirements=(
        "numpy==1.26.4",
        "onnx==1.18.0",
        "protobuf==4.25.4",
        "onnxruntime==1.20.1",
        "torch==2.13.0",
        "setuptools<81",
        "scipy==1.13.1",
        "opencv-python-headless==4.10.0.84",
        "psutil==5.9.8",
        "ruamel.yaml==0.18.6",
        "tqdm==4.66.5",
        "fast-histogram==0.14",
    ),
    # Installed without its dependencies: its metadata asks for torch<=2.4 (CUDA wheels, 5.6 GB).
    no_deps=("rknn-toolkit2==2.5.0",),
    check_import="rknn.api",
    fingerprint_dists=("rknn-toolkit2", "numpy", "onnx", "onnxruntime", "torch", "protobuf"),
    install_hint="run `npuctl toolchain install rknn`",
)

TFLITE = Toolchain(
    name="tflite",
    version="1.29.24",
    # onnx2tf's own exact pins (numpy 1.26.4, onnx 1.19, onnxruntime 1.23, tensorflow 2.19: they
    # conflict with the main stack's numpy 2 / onnx 1.23 / onnxruntime 1.32), with the headless
    # OpenCV build (the desktop one needs libGL, absent on servers) and LiteRT for host runs.
    requirements=(
        "numpy==1.26.4",
        "onnx==1.19.1",
        "onnxruntime==1.23.0",
        "tensorflow==2.19.0",
        "tf-keras==2.19.0",
        "ai-edge-litert==2.1.0",
        "onnxsim==0.4.36",
        "onnxoptimizer==0.4.2",
        "onnx-graphsurgeon==0.5.8",
        "simple-onnx-processing-tools==1.1.32",
        "opencv-python-headless==4.11.0.86",
        "psutil==5.9.5",
        "protobuf==4.25.5",
        "h5py==3.11.0",
        "ml-dtypes==0.5.1",
        "flatbuffers==25.12.19",
        "requests==2.32.5",
    ),
    # Without its dependencies: it asks for the desktop opencv-python (libGL).
    no_deps=("onnx2tf==1.29.24",),
    check_import="onnx2tf",
    fingerprint_dists=("onnx2tf", "tensorflow", "ai-edge-litert", "numpy", "onnx", "onnxruntime"),
    install_hint="run `npuctl toolchain install tflite`",
)

COREML = Toolchain(
    name="coreml",
    version="9.0",
    # coremltools converts from PyTorch: onnx2torch -> torch.jit.trace -> ct.convert. torch 2.13.0 is
    # the CPU build on this machine's local disk (any other torch pulls gigabytes of CUDA wheels).
    requirements=(
        "numpy==1.26.4",
        "onnx==1.19.1",
        "protobuf==4.25.5",
        "torch==2.13.0",
        "coremltools==9.0",
    ),
    # Without its dependencies: onnx2torch asks for torchvision, whose wheel breaks beside CPU torch
    # ("operator torchvision::nms does not exist"); the converters used here do not need it.
    no_deps=("onnx2torch==1.5.15",),
    check_import="coremltools",
    fingerprint_dists=("coremltools", "onnx2torch", "torch", "numpy", "onnx"),
    install_hint="run `npuctl toolchain install coreml`",
)

TOOLCHAINS: dict[str, Toolchain] = {RKNN.name: RKNN, TFLITE.name: TFLITE, COREML.name: COREML}


class InstallError(RuntimeError):
    """pip or the import check failed; the message names the step and the log holds the output."""


def root() -> Path:
    """Where managed environments live."""
    override = os.environ.get("NPUCTL_TOOLCHAINS")
    if override:
        return Path(override).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "npuctl" / "toolchains"


def location(tc: Toolchain) -> Path:
    return root() / tc.dirname


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


ABSENT_ENV = "NPUCTL_ABSENT_TOOLCHAINS"
"""Comma-separated toolchain names (rknn, openvino) to treat as not installed: a machine without them,
simulated honestly (every check that detects the toolchain answers "missing", so fingerprints, keys and
`missing_toolchain()` are those of that machine)."""


def absent(name: str) -> bool:
    listed = os.environ.get(ABSENT_ENV, "")
    return name in {part.strip() for part in listed.split(",")}


def marker(tc: Toolchain) -> dict[str, object] | None:
    """The completed install's record, or None when the venv is absent or incomplete."""
    if absent(tc.name):
        return None
    path = location(tc) / MARKER
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != MARKER_FORMAT:
        return None
    if not venv_python(location(tc)).exists():
        return None
    return data


def python(tc: Toolchain) -> Path | None:
    """The venv's interpreter when the toolchain is installed, else None."""
    return venv_python(location(tc)) if marker(tc) is not None else None


def fingerprint(tc: Toolchain) -> dict[str, str]:
    """Versions that go into build keys: the installed ones when the venv exists, else the pins (which
    is what an install produces; a mismatch after install changes the key, as it should)."""
    data = marker(tc)
    installed = data.get("versions") if data else None
    if isinstance(installed, dict):
        return {k: str(installed.get(k, "missing")) for k in tc.fingerprint_dists}
    pins = _pinned(tc)
    return {k: pins.get(_canonical(k), "unpinned") for k in tc.fingerprint_dists}


def environment(tc: Toolchain) -> str:
    """A digest of every distribution the installed venv resolved (installer tools aside), or
    "not installed": its unpinned dependencies (opencv, scipy, flatbuffers, ...) run in its builds too."""
    import hashlib

    data = marker(tc)
    installed = data.get("versions") if data else None
    if not isinstance(installed, dict):
        return "not installed"
    kept = {k: str(v) for k, v in sorted(installed.items()) if k not in ("pip", "setuptools", "wheel")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pinned(tc: Toolchain) -> dict[str, str]:
    out = {}
    for req in (*tc.requirements, *tc.no_deps):
        name, sep, ver = req.partition("==")
        if sep:
            out[_canonical(name)] = ver
    return out


def installed_versions(venv: Path) -> dict[str, str]:
    """distribution -> version from the venv's `*.dist-info` folders (no import, no subprocess)."""
    versions: dict[str, str] = {}
    for site in sorted(venv.glob("lib/python*/site-packages")) + sorted(venv.glob("Lib/site-packages")):
        for info in site.glob("*.dist-info"):
            meta = info / "METADATA"
            try:
                head = meta.read_text(errors="replace").split("\n\n", 1)[0]
            except OSError:
                continue
            name = re.search(r"^Name:\s*(.+)$", head, re.M)
            ver = re.search(r"^Version:\s*(.+)$", head, re.M)
            if name and ver:
                versions[_canonical(name.group(1).strip())] = ver.group(1).strip()
    return dict(sorted(versions.items()))


def _run(cmd: list[str], log: Logger, step: str) -> None:
    """One install step, from a neutral folder: never the user's (a repository's `pip/` stays unseen)."""
    log(f"$ {' '.join(cmd)}")
    proc = run(cmd, step, None, cwd=NEUTRAL_CWD)
    output = proc.stdout + proc.stderr
    log(output)
    if proc.returncode != 0:
        tail = " | ".join(line for line in output.strip().splitlines()[-3:] if line.strip())
        raise InstallError(f"{step} failed (exit {proc.returncode}): {tail[-400:]}")


def install(
    tc: Toolchain, log: Logger = lambda _m: None, force: bool = False, wheel: Path | None = None
) -> Path:
    """Creates the venv (idempotent: a complete one is kept unless `force`). Returns its folder.

    `wheel` installs the toolchain from a local file instead of the registry (offline CI caches).
    """
    final = location(tc)
    if marker(tc) is not None and not force:
        log(f"{tc.dirname}: already installed at {final}")
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{tc.dirname}-", dir=final.parent))
    try:
        # venvs are not relocatable (scripts embed their path): build in place under the final name
        # only after a successful build, so we build in staging and rewrite nothing: python -m pip is
        # always called through the interpreter path, which resolves relative to the venv.
        _run(python_argv("-m", "venv", str(staging)), log, "python -m venv")
        py = str(venv_python(staging))
        # --no-compile: byte-compiling every file of torch and friends was most of an install's time;
        # what a build imports is compiled on first import instead
        pip = python_argv(
            "-m",
            "pip",
            "install",
            "--no-input",
            "--disable-pip-version-check",
            "--no-compile",
            interpreter=py,
        )
        _run([*pip, *tc.requirements], log, "pip install (pinned dependencies)")
        toolchain_reqs = [str(wheel.resolve())] if wheel is not None else list(tc.no_deps)
        _run([*pip, "--no-deps", *toolchain_reqs], log, f"pip install --no-deps {' '.join(tc.no_deps)}")
        _run(python_argv("-c", f"import {tc.check_import}", interpreter=py), log, f"import {tc.check_import}")
        versions = installed_versions(staging)
        record = {"format": MARKER_FORMAT, "toolchain": tc.name, "version": tc.version, "versions": versions}
        (staging / MARKER).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
        _fix_paths(final, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log(f"{tc.dirname}: installed at {final}")
    return final


def _fix_paths(final: Path, staging: Path) -> None:
    """Points the venv's own files at its final folder (pyvenv.cfg and bin/ scripts embed the path)."""
    old, new = str(staging), str(final)
    candidates = [final / "pyvenv.cfg", *sorted((final / "bin").glob("*"))]
    for path in candidates:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > 1_000_000:
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        if old in text:
            path.write_text(text.replace(old, new))


def remove(tc: Toolchain) -> bool:
    path = location(tc)
    if not path.exists():
        return False
    shutil.rmtree(path)
    return True


def status(tc: Toolchain) -> dict[str, object]:
    """One row of `npuctl toolchain list`."""
    data = marker(tc)
    return {
        "name": tc.name,
        "version": tc.version,
        "installed": data is not None,
        "path": str(location(tc)),
        "fingerprint": fingerprint(tc),
    }
