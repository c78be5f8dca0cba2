"""The validated-spec cache (reconciler.spec._cache): a hit needs no parse, and any change to the spec,
to a file it extends or to its model is seen on the next run."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from reconciler.spec import _check, check
from reconciler.state.statcache import RACY_NS
from tests.spec.conftest import GOOD_CLS, Repo
from tests.spec.test_extends import BASE, child


def _age(*paths: Path) -> None:
    """Stamp the files a minute old and wait out the racy window (the utime moved their ctime to now):
    files changed just now are never cached (reconciler.state.statcache)."""
    past = time.time_ns() - 60 * 10**9
    for path in paths:
        os.utime(path, ns=(past, past))
    time.sleep(RACY_NS / 1e9 + 0.05)


def _no_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(path: Path, root: Path) -> object:
        raise AssertionError(f"{path} was parsed again")

    monkeypatch.setattr(_check, "attempt", boom)


def test_an_unchanged_spec_comes_from_the_cache(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    spec_file = repo.write("specs/a.yaml", GOOD_CLS)
    _age(spec_file)
    (first,) = check([repo.root / "specs"], repo.root)
    assert first.valid
    _no_parse(monkeypatch)
    (again,) = check([repo.root / "specs"], repo.root)
    assert again.valid and again.spec is not None
    assert again.spec.spec_json == first.spec.spec_json and again.spec.name == "cls-cpu"
    assert again.spec.position("inputs.x")[1:] == first.spec.position("inputs.x")[1:]  # re-read lazily


def test_an_edited_base_invalidates_every_spec_extending_it(repo: Repo) -> None:
    base = repo.write("specs/bases/common.yaml", BASE)
    spec_file = repo.write("specs/a.yaml", child())
    _age(base, spec_file)
    (first,) = check([repo.root / "specs"], repo.root)
    assert first.spec is not None and first.spec.field("quantization.calibration.samples") == 8
    base.write_text(BASE.replace("samples: 8", "samples: 0"))
    _age(base)  # even with an old mtime the edit changes size and ctime
    (again,) = check([repo.root / "specs"], repo.root)
    assert not again.valid
    assert any("samples" in str(e) for e in again.errors), again.errors


def test_a_replaced_model_is_checked_again(repo: Repo) -> None:
    spec_file = repo.write("specs/a.yaml", GOOD_CLS)
    _age(spec_file)
    assert check([repo.root / "specs"], repo.root)[0].valid
    squeezenet = (repo.root / "models" / "squeezenet.onnx").read_bytes()
    model = repo.root / "models" / "cls.onnx"
    model.unlink()
    model.write_bytes(squeezenet)  # another model under the same name: input data_0, not x
    (again,) = check([repo.root / "specs"], repo.root)
    assert any("no input 'x'" in str(e) for e in again.errors), again.errors
