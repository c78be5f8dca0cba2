"""The repository's example specs: schema line, valid against the pydantic models, files present."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

from backends.catalog import targets
from reconciler.spec.models import Deployment

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "specs"
SCHEMA_LINE = "# yaml-language-server: $schema=../schemas/deployment.schema.json"
EXPECTED = {
    "digits-cpu",
    "digits-cpu-uint8",
    "digits-intel-npu",
    "ppocr-cls-cpu",
    "ppocr-rec-rk3588",
}


def merge(base: Any, child: Any) -> Any:
    """The documented `extends` semantics: mappings merge, everything else is replaced by the child."""
    if isinstance(base, dict) and isinstance(child, dict):
        return {**base, **{k: merge(base[k], v) if k in base else v for k, v in child.items()}}
    return child


def resolved(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    if "extends" not in doc:
        return doc
    base = resolved(path.parent / doc["extends"])
    base["kind"] = "Deployment"
    return merge(base, doc)


def spec_files() -> list[Path]:
    return sorted(p for p in SPECS.glob("*.yaml") if yaml.safe_load(p.read_text())["kind"] == "Deployment")


def test_expected_specs_present() -> None:
    names = {yaml.safe_load(p.read_text())["metadata"]["name"] for p in spec_files()}
    assert names >= EXPECTED
    assert {p.stem for p in spec_files()} >= EXPECTED, "file name = metadata.name"


@pytest.mark.parametrize("path", sorted(SPECS.glob("*.yaml")), ids=lambda p: p.name)
def test_starts_with_the_schema_line(path: Path) -> None:
    assert path.read_text().splitlines()[0] == SCHEMA_LINE


@pytest.mark.parametrize("path", spec_files(), ids=lambda p: p.name)
def test_validates_and_names_existing_files(path: Path) -> None:
    deployment = Deployment.model_validate(resolved(path))
    spec = deployment.spec
    assert spec.target in targets()
    assert spec.evaluate.runs <= 100, "keep `npuctl apply specs/` quick"
    if spec.model.package:
        found = importlib.util.find_spec(spec.model.package)
        if found is None:
            pytest.skip(f"{spec.model.package} missing (pip install npuctl[examples])")
        folder = Path(next(iter(found.submodule_search_locations or [])))
        assert (folder / (spec.model.path or "")).is_file()
    # Every path in these specs is written in the file that defines it, relative to that file; all of
    # them live in specs/, so they resolve against specs/.
    for relative in (
        spec.model.path if not spec.model.package else None,
        spec.quantization.calibration.data if spec.quantization.calibration else None,
        spec.evaluate.data,
        spec.evaluate.labels,
    ):
        if relative is not None:
            target = (SPECS / relative).resolve()
            assert target.exists(), relative
            assert target.is_relative_to(REPO)
    calibration = spec.quantization.calibration
    if calibration is not None:
        files = [p for p in (SPECS / calibration.data).iterdir() if p.suffix in (".npy", ".png")]
        assert len(files) >= calibration.samples


def test_loader_accepts_every_spec() -> None:
    """The real loader (extends, semantic checks against the ONNX graphs) finds no error."""
    from reconciler.spec import check

    reports = check([SPECS], REPO)
    errors = [str(e) for r in reports for e in r.errors]
    assert errors == []
    assert {r.name for r in reports} >= EXPECTED
