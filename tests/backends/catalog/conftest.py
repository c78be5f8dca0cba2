"""Fixtures for the catalog tests: the generator script, which is not in a package (tools/)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def gen() -> ModuleType:
    """tools/gen_optables.py imported as a module."""
    path = REPO / "tools" / "gen_optables.py"
    spec = importlib.util.spec_from_file_location("gen_optables", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_optables"] = module
    spec.loader.exec_module(module)
    return module
