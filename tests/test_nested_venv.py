"""A venv built inside the test interpreter imports that interpreter's packages, after its own and after
the folders it is given first, also under `python -I` (how npuctl starts its children)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests import nested_venv
from tests.conftest import ROOT


def test_a_nested_venv_imports_this_interpreters_packages_after_its_own(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    python = nested_venv.create(venv, [ROOT], pip=False)
    probe = "import json, sys, pytest; print(json.dumps([sys.path, pytest.__file__]))"
    shown = subprocess.run([str(python), "-I", "-c", probe], capture_output=True, text=True, check=True)
    path, pytest_file = json.loads(shown.stdout)
    assert pytest_file == pytest.__file__, "this interpreter's pytest, not the base interpreter's"
    outer = [str(p) for p in nested_venv.site_folders()]
    assert outer, "the test interpreter imports from at least one site-packages folder"
    positions = [path.index(p) for p in (str(nested_venv.site_packages(venv)), str(ROOT), *outer)]
    assert positions == sorted(positions), path
