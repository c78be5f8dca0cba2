"""`npuctl toolchain install --needed`: the managed environments the repository's specs build with."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from reconciler.cli import cli
from reconciler.cli.toolchain import needed_toolchains
from tests.spec.conftest import GOOD, make_repo


def test_only_the_toolchains_the_specs_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path / "repo")
    monkeypatch.chdir(repo.root)
    assert "  target: cpu\n" in GOOD
    repo.write("specs/a.yaml", GOOD)
    assert needed_toolchains(()) == [], "ONNX Runtime needs no managed environment"
    repo.write(
        "specs/b.yaml",
        GOOD.replace("  target: cpu\n", "  target: rk3588\n").replace("name: ", "name: rk-", 1),
    )
    assert needed_toolchains(()) == ["rknn"]
    assert needed_toolchains((Path("specs/a.yaml"),)) == []


def test_a_name_or_needed_not_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(make_repo(tmp_path / "repo").root)
    both = CliRunner().invoke(cli, ["toolchain", "install", "rknn", "--needed"], standalone_mode=False)
    neither = CliRunner().invoke(cli, ["toolchain", "install"], standalone_mode=False)
    assert both.return_value == 1 and neither.return_value == 1
    assert "give a toolchain NAME or --needed" in both.stderr + both.output
