"""Fixtures shared by the engine and end-to-end tests: real git repositories with the real digits model."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.pop("COLUMNS", None)  # pytest-xdist's workers set 80: commands under test use their piped defaults
DIGITS = ROOT / "examples" / "digits"

DIGITS_SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
metadata:
  name: {name}
  labels: {{team: tests}}
spec:
  model: {{path: ../models/digits.onnx, version: v1}}
  target: cpu
  inputs: {{image: [1, 1, 8, 8]}}
  evaluate:
    data: ../data/eval
    labels: ../data/eval/labels.txt
    warmup: 1
    runs: 5
  slo:
    latency_ms: {{p90: 1000}}
    accuracy: {{min: 0.5}}
"""


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    done = subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True)
    return done.stdout


def source_copy(dest: Path) -> Path:
    """This checkout's package sources (what `pip install` builds from), copied to `dest` so that pip's
    in-tree build never writes into the checkout."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / name, dest / name)
    for package in ("reconciler", "backends"):
        shutil.copytree(ROOT / package, dest / package, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text(".npuctl/\n")
    (repo / "specs").mkdir()
    return repo


def copy_digits(repo: Path, eval_samples: int = 40, calib_samples: int = 40) -> None:
    """The real digits model and the first N samples of its real data (small, so tests stay quick).

    The model keeps its file times (copy2): a model modified in the last seconds is never summary-cached
    (reconciler.spec._summary), so with a fresh mtime every npuctl run of the test would import onnx."""
    (repo / "models").mkdir(exist_ok=True)
    shutil.copy2(DIGITS / "model.onnx", repo / "models" / "digits.onnx")
    for kind, count in (("eval", eval_samples), ("calib", calib_samples)):
        src = DIGITS / "data" / kind
        dst = repo / "data" / kind
        dst.mkdir(parents=True, exist_ok=True)
        names = sorted(p.name for p in src.glob("*.npy"))[:count]
        for name in names:
            shutil.copyfile(src / name, dst / name)
        if kind == "eval":
            wanted = set(names)
            lines = [ln for ln in (src / "labels.txt").read_text().splitlines() if ln.split()[0] in wanted]
            (dst / "labels.txt").write_text("\n".join(lines) + "\n")


@pytest.fixture
def digits_repo(git_repo: Path) -> Path:
    copy_digits(git_repo)
    (git_repo / "specs" / "digits.yaml").write_text(DIGITS_SPEC.format(name="digits"))
    return git_repo


def run_npuctl(
    cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """The real command line, in a fresh interpreter, as a user runs it."""
    full_env = {**os.environ, "CI": "1", "NPUCTL_RETRY_BASE_S": "0.05", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def npuctl() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_npuctl


TIMING_SENSITIVE = ("tests/watch/", "tests/e2e/test_crash_and_concurrency.py")
# Files that take minutes on 2 cores (real models through vendor converters, fresh venvs), measured with
# `pytest --durations`: started next, so that under `--dist loadfile` the run does not end with one of
# them alone on one worker while the others idle (longest first is the classic schedule for that).
LONGEST = (
    "tests/backends/tflite/test_real_exports.py",
    "tests/backends/passes/test_quantize_ppocr.py",
    "tests/e2e/test_repository_specs.py",
    "tests/test_quick_start.py",
    "tests/backends/rknn/test_rknn_e2e.py",
    "tests/backends/coreml/test_coreml.py",
    "tests/backends/passes/test_qdq_placement.py",
    "tests/e2e/test_readme_commands.py",
    "tests/gitops/test_ci_examples.py",
    "tests/backends/tflite/test_tflite_backends.py",
    "tests/engine/test_field_matrix.py",
    "tests/backends/tflite/test_recurrent_tflite.py",
)


def _order(item: pytest.Item) -> int:
    if item.nodeid.startswith(TIMING_SENSITIVE):
        return 0
    return 1 if item.nodeid.startswith(LONGEST) else 2


def pytest_configure(config: pytest.Config) -> None:
    """xdist keeps the collection order below only with its loadscope reordering off (its
    `--no-loadscope-reorder`; by default it orders files by their number of tests). Set here rather
    than in pyproject's addopts, which a run without xdist (`-p no:xdist`) would refuse."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The watch loop's debounce windows and the concurrent-apply test measure real time: run them first,
    before the process carries the caches, threads and temporary files of a thousand other tests
    (late in a full run they failed where they pass alone); then the longest files (pytest_configure
    keeps xdist to this order)."""
    items.sort(key=_order)


def signed_again(repo: Path, lock_path: Path) -> None:
    """A lock edited by a test as another builder would have written it, signed again as a trusted
    builder signs its records: the edit's stale signatures dropped, then `npuctl key sign-locks
    --adopt-unsigned` with this machine's key (trusted here, as the other builder's key would be in
    the repository's policy)."""
    import json

    lock = json.loads(lock_path.read_text())
    for variant in lock.get("variants", {}).values():
        for stage in variant.get("stages", {}).values():
            stage.pop("signed", None)
    lock_path.write_text(json.dumps(lock, sort_keys=True, indent=2, ensure_ascii=False) + "\n")
    done = run_npuctl(repo, "key", "sign-locks", "--adopt-unsigned")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="session")
def quantized_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """PP-OCR's classifier (tests.spec.conftest.CLS) quantized by ONNX Runtime's own quantizers, as users receive such models:
    `qdq` (static, Q/DQ format) and `integer` (dynamic, integer operators)."""
    import numpy as np
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_dynamic, quantize_static

    class Frames(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(0)
            self.left = [{"x": rng.random((1, 3, 48, 192), dtype=np.float32)} for _ in range(2)]

        def get_next(self) -> dict[str, np.ndarray] | None:
            return self.left.pop() if self.left else None

    folder = tmp_path_factory.mktemp("quantized")
    out = {"qdq": folder / "qdq.onnx", "integer": folder / "integer.onnx"}
    from tests.spec.conftest import CLS

    quantize_static(CLS, out["qdq"], Frames(), quant_format=QuantFormat.QDQ)
    quantize_dynamic(CLS, out["integer"])
    return out


def qdq_digits(repo: Path) -> Path:
    """`models/qdq.onnx`: the repository's digits model quantized by ONNX Runtime's static quantizer
    (Q/DQ format) on its calibration samples, as a model that arrives quantized (`mode: qat`)."""
    import numpy as np
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Calibration(CalibrationDataReader):
        def __init__(self) -> None:
            files = sorted((repo / "data" / "calib").glob("*.npy"))
            self.left = [{"image": np.load(f).astype(np.float32)} for f in files]

        def get_next(self) -> dict[str, np.ndarray] | None:
            return self.left.pop() if self.left else None

    out = repo / "models" / "qdq.onnx"
    quantize_static(repo / "models" / "digits.onnx", out, Calibration(), quant_format=QuantFormat.QDQ)
    return out


def quantized_cls_spec(repo: Path, model: Path, name: str, target: str, extra: str = "") -> None:
    """A one-spec repository around `model` (one of `quantized_models`: PP-OCR's classifier, input x at
    [1, 3, 48, 192]) copied to models/<name>.onnx, for `target`; `extra`: more spec lines."""
    (repo / "models").mkdir(exist_ok=True)
    shutil.copyfile(model, repo / "models" / f"{name}.onnx")
    (repo / "specs" / f"{name}.yaml").write_text(
        f"apiVersion: npuctl/v1\nkind: Deployment\nmetadata: {{name: {name}}}\nspec:\n"
        f"  model: {{path: ../models/{name}.onnx}}\n  target: {target}\n  inputs: {{x: [1, 3, 48, 192]}}\n{extra}"
    )
