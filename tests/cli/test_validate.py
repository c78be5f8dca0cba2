"""`npuctl validate`: every error on its own line, exit 0 valid / 1 invalid, --json, fast start-up."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from reconciler.cli import cli
from reconciler.cli._specargs import UnknownSpec
from tests.spec.conftest import GOOD, GOOD_CLS, Repo, edit, make_repo


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Repo]:
    made = make_repo(tmp_path / "repo")
    monkeypatch.chdir(made.root)
    yield made


def validate(*args: str) -> Result:
    return CliRunner().invoke(cli, ["validate", *args], standalone_mode=False, catch_exceptions=False)


def test_valid_specs_exit_0(repo: Repo) -> None:
    repo.write("specs/a.yaml", GOOD)
    repo.write("specs/b.yaml", GOOD_CLS)
    result = validate()
    assert result.return_value == 0
    assert result.stdout == ""
    assert "2 spec(s) checked: 2 valid" in result.stderr


def test_every_error_on_its_own_line_exit_1(repo: Repo) -> None:
    repo.write("specs/a.yaml", edit(GOOD, {8: "  target: rk3599", 15: "      samples: 0"}))
    repo.write("specs/b.yaml", edit(GOOD_CLS, {4: "  name: cls-b", 9: "    x: [1, 3, 48]"}))
    repo.write("specs/c.yaml", edit(GOOD, {4: "  name: fine"}))
    result = validate()
    assert result.return_value == 1
    assert result.stdout.splitlines() == [
        "specs/a.yaml:8:11: spec.target: unknown target 'rk3599'; "
        "did you mean 'rk3588', 'rk3576' or 'rk3566'? (`npuctl targets` lists them)",
        "specs/a.yaml:15:16: spec.quantization.calibration.samples: must be > 0, got the integer 0",
        "specs/b.yaml:9:8: spec.inputs.x: rank 3, but model input 'x' has rank 4: [?, 3, ?, ?]",
    ]
    assert "3 spec(s) checked: 1 valid, 2 invalid (3 error(s))" in result.stderr


def test_json_output(repo: Repo) -> None:
    repo.write("specs/a.yaml", GOOD)
    repo.write(
        "specs/b.yaml", "apiVersion: npuctl/v1\nkind: Deployment\nmetadata: {name: b}\nspec: {target: cpu}\n"
    )
    result = validate("--json")
    assert result.return_value == 1
    out = json.loads(result.stdout)
    assert out["format_version"] == 1
    assert [(s["file"], s["name"], s["valid"]) for s in out["specs"]] == [
        ("specs/a.yaml", "squeeze-cpu", True),
        ("specs/b.yaml", "b", False),
    ]
    assert out["specs"][1]["errors"] == [
        {"file": "specs/b.yaml", "line": 4, "column": 1, "field": field, "message": "required key is missing"}
        for field in ("spec.inputs", "spec.model")
    ]


def test_explicit_paths_and_missing_ones(repo: Repo) -> None:
    repo.write("specs/a.yaml", GOOD)
    repo.write("specs/b.yaml", "not: [valid\n")
    assert validate("specs/a.yaml").return_value == 0
    with pytest.raises(UnknownSpec) as raised:
        validate("specs/a.yaml", "specs/nothere.yaml")
    assert raised.value.exit_code == 1
    assert raised.value.message.startswith("specs/nothere.yaml: no such file or folder, and no spec under")


def test_no_specs_is_an_error(repo: Repo) -> None:
    result = validate()
    assert result.return_value == 1
    assert "no deployment specs found in specs" in result.stderr


def test_default_path_is_specs_under_the_repository_root(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    repo.write("specs/a.yaml", GOOD)
    monkeypatch.chdir(repo.root / "data" / "eval")
    result = validate()
    assert result.return_value == 0, result.stdout


def test_real_entry_point_exit_codes_and_no_heavy_imports(repo: Repo) -> None:
    repo.write("specs/a.yaml", GOOD)
    program = (
        "import sys\n"
        "from reconciler.cli import cli\n"
        "rc = cli.main(['validate'], standalone_mode=False)\n"
        "heavy = ('onnx', 'onnxruntime', 'numpy', 'reconciler.engine')\n"
        "print(rc, sorted(m for m in heavy if m in sys.modules))\n"
    )

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", program], cwd=repo.root, capture_output=True, text=True)

    first = run()  # summarizes the model (imports onnx) and caches the summary
    assert first.stdout.startswith("0 "), first.stderr
    second = run()
    assert second.stdout.strip() == "0 []", second.stderr
    repo.write("specs/a.yaml", edit(GOOD, {22: "    runs: 0"}))
    broken = subprocess.run(
        [sys.executable, "-c", "from reconciler.cli import main; main()", "validate"],
        cwd=repo.root, capture_output=True, text=True,
    )  # fmt: skip
    assert broken.returncode == 1
    assert broken.stdout == "specs/a.yaml:22:11: spec.evaluate.runs: must be > 0, got the integer 0\n"


def test_a_target_without_a_backend_is_a_validate_error(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    """A catalog target whose backend is not registered fails validate at spec.target, never apply."""
    from backends import registry

    monkeypatch.setattr(
        registry, "BUILTIN", {k: v for k, v in registry.BUILTIN.items() if k != "onnxruntime"}
    )
    repo.write("specs/a.yaml", GOOD)
    result = validate()
    assert result.return_value == 1
    line = result.stdout.strip()
    assert line.startswith("specs/a.yaml:8:11: spec.target: target 'cpu' has no backend here:"), line
    assert "backend 'onnxruntime' is not registered" in line and len(result.stdout.splitlines()) == 1


BASE = """\
apiVersion: npuctl/v1
kind: DeploymentBase
metadata:
  labels: {team: t}
spec:
  evaluate:
    warmup: 2
"""


def test_a_base_file_is_checked_on_its_own(repo: Repo) -> None:
    """A DeploymentBase is never built, but validate checks it where it lies (named or in a folder)."""
    repo.write("specs/shared.base.yaml", BASE)
    named = validate("specs/shared.base.yaml")
    assert named.return_value == 0, named.stdout
    assert "1 base file(s): 1 valid" in named.stderr and "no deployment specs" not in named.stderr

    repo.write("specs/a.yaml", GOOD)
    repo.write("specs/shared.base.yaml", BASE.replace("    warmup: 2", "    warmup: -2\n    wramup: 1"))
    result = validate()
    assert result.return_value == 1
    lines = result.stdout.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("specs/shared.base.yaml:8:5: spec.evaluate.wramup: unknown field")
    assert lines[1] == "specs/shared.base.yaml:7:13: spec.evaluate.warmup: -2 is less than the minimum of 0"
    assert "1 spec(s) checked: 1 valid; 1 base file(s): 0 valid, 1 invalid" in result.stderr
    as_json = json.loads(validate("--json").stdout)
    assert [b["valid"] for b in as_json["bases"]] == [False]


def test_every_catalog_target_has_a_backend_that_loads() -> None:
    from backends import registry
    from backends.catalog import targets

    for target in targets().values():
        assert target.backend in registry.known(), target.id
        assert registry.backend(target.backend).name == target.backend, target.id


RKNN_NO_DATA = GOOD.replace("  target: cpu", "  target: rk3588").replace(
    "    data: ../data/eval\n    labels: ../data/eval/labels.txt\n", ""
)
"""GOOD on rk3588 without evaluate.data: its evaluate (runner local, the simulator) cannot run."""


def _line_of(text: str, start: str) -> int:
    [line] = [i for i, t in enumerate(text.splitlines(), 1) if t.startswith(start)]
    return line


def test_an_rknn_target_without_evaluate_data_fails_at_the_evaluate_section(repo: Repo) -> None:
    repo.write("specs/a.yaml", RKNN_NO_DATA)
    result = validate()
    assert result.return_value == 1
    line = _line_of(RKNN_NO_DATA, "  evaluate:")
    [error] = result.stdout.splitlines()
    assert error.startswith(f"specs/a.yaml:{line}:3: spec.evaluate.data: evaluate needs evaluate.data: ")
    board = RKNN_NO_DATA.replace("    runs: 5\n", "    runs: 5\n    runner: ssh://pi@board\n")
    repo.write("specs/a.yaml", board)
    assert validate().return_value == 0, "on the board, evaluate falls back to random inputs"


def test_a_data_folder_of_subfolders_only_fails_at_its_field_and_says_they_are_not_searched(
    repo: Repo,
) -> None:
    calib = repo.root / "data" / "calib"
    (calib / "0.npy").unlink()
    for sub in ("cats", "dogs"):
        (calib / sub).mkdir()
        (calib / sub / "0.npy").write_bytes(b"")
    repo.write("specs/a.yaml", GOOD)
    result = validate()
    assert result.return_value == 1
    line = _line_of(GOOD, "      data: ../data/calib")
    [error] = result.stdout.splitlines()
    assert error.startswith(f"specs/a.yaml:{line}:13: spec.quantization.calibration.data: folder ")
    assert "holds no samples" in error and "2 subfolder(s) (cats, dogs) are not searched" in error
    (calib / "cats" / "0.npy").rename(calib / "0.npy")
    assert validate().return_value == 0
