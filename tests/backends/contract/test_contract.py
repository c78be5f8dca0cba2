"""The contract every registered backend keeps (built-in and entry-point ones alike)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from backends import registry
from backends.catalog import targets
from backends.sdk.base import STAGES, Backend, StageImpl
from backends.sdk.errors import UnsupportedStage
from backends.sdk.registration import Registration

ROOT = Path(__file__).resolve().parents[3]
HEAVY = ("openvino", "nncf", "rknn", "onnxruntime", "torch", "tensorflow", "coremltools")
"""Toolchain modules a backend must not import to answer fingerprint/schema/missing_toolchain."""


def _names() -> list[str]:
    return sorted(registry.known())


def check_backend(backend: Backend, name: str) -> None:
    """The whole contract, reusable for third-party backends."""
    assert isinstance(backend, Backend)
    assert backend.name == name
    first, second = backend.fingerprint(), backend.fingerprint()
    assert first == second, "fingerprint must be stable"
    assert first and all(isinstance(k, str) and isinstance(v, str) for k, v in first.items())
    json.dumps(first)
    schema = backend.options_schema()
    Draft202012Validator.check_schema(schema)
    assert schema.get("type") == "object"
    assert schema.get("additionalProperties") is False
    Draft202012Validator(schema).validate({})
    assert list(Draft202012Validator(schema).iter_errors({"no_such_option_xyz": 1})), (
        "unknown options must fail"
    )
    missing = backend.missing_toolchain()
    if missing is not None:
        assert isinstance(missing, str) and missing.strip()
        assert "\n" not in missing, "one line"
        assert any(w in missing.lower() for w in ("install", "pip", "npuctl toolchain", "set ")), missing
    assert set(backend.stages) <= set(STAGES), "stages are the pipeline's (verify is the engine's own)"
    for stage, registration in backend.stages.items():
        assert isinstance(registration, Registration) and registration.stage == stage
        assert registration.name and registration.version
        impl = registration.load()
        assert isinstance(impl, StageImpl)
        assert impl.stage == stage
        fp = registration.identity()["fingerprint"]
        assert fp == registration.identity()["fingerprint"]
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in fp.items())


@pytest.mark.parametrize("name", _names())
def test_backend_contract(name: str) -> None:
    check_backend(registry.backend(name), name)


@pytest.mark.parametrize("name", _names())
def test_fingerprint_imports_no_toolchain(name: str) -> None:
    """plan computes keys without loading any toolchain: checked in a fresh interpreter."""
    code = textwrap.dedent(
        f"""
        import json, sys
        from backends import registry
        b = registry.backend({name!r})
        b.fingerprint(); b.options_schema(); b.missing_toolchain()
        print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {list(HEAVY)!r})))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_builtin_backends_cover_their_targets() -> None:
    for t in targets().values():
        if t.backend in ("openvino", "rknn", "qnn", "cann"):
            assert t.backend in registry.known()


# ---------------------------------------------------------------- third-party backend via entry point

FAKE = """
from backends.sdk.base import StageOutput
from backends.sdk.registration import Registration


class FakeCompile:
    stage = "compile"

    def fingerprint(self):
        return {"fakec": "1.0"}

    def run(self, request):
        out = request.workdir / "fake.bin"
        out.write_bytes(b"x")
        return StageOutput(artifacts={"fake": out})


class FakeBackend:
    name = "fakenpu"
    stages = {"compile": Registration("compile", name="fake.compile", version="7", ref="fake_npu_backend:FakeCompile")}

    def fingerprint(self):
        return {"fakec": "1.0"}

    def options_schema(self):
        return {"type": "object", "additionalProperties": False, "properties": {"turbo": {"type": "boolean"}}}

    def missing_toolchain(self):
        return None


class OldBackend(FakeBackend):
    stages = None
"""


@pytest.fixture
def fake_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real installed distribution (dist-info with entry_points.txt) on sys.path."""
    (tmp_path / "fake_npu_backend.py").write_text(FAKE)
    info = tmp_path / "fake_npu_backend-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-npu-backend\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[npuctl.backends]\nfakenpu = fake_npu_backend:FakeBackend\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.backend.cache_clear()
    yield tmp_path
    registry.backend.cache_clear()
    sys.modules.pop("fake_npu_backend", None)


def test_entry_point_backend_is_found(fake_distribution: Path) -> None:
    assert "fakenpu" in {ep.name for ep in entry_points(group="npuctl.backends")}
    assert registry.known()["fakenpu"] == "fake_npu_backend:FakeBackend"
    backend = registry.backend("fakenpu")
    check_backend(backend, "fakenpu")
    from dataclasses import replace

    target = replace(targets()["rk3588"], id="fake-target", backend="fakenpu")
    impl = registry.implementation(target, "compile")
    assert type(impl).__name__ == "FakeCompile"
    assert registry.identity(target, "compile") == {
        "name": "fake.compile",
        "version": "7",
        "fingerprint": {"fakec": "1.0"},
    }
    # stages the third-party backend does not implement fall back to the shared ONNX passes
    assert registry.implementation(target, "import").stage == "import"


def test_builtin_names_win_over_entry_points(fake_distribution: Path) -> None:
    info = fake_distribution / "fake_npu_backend-0.1.dist-info" / "entry_points.txt"
    info.write_text(
        "[npuctl.backends]\nfakenpu = fake_npu_backend:FakeBackend\nrknn = fake_npu_backend:FakeBackend\n"
    )
    assert registry.known()["rknn"] == registry.BUILTIN["rknn"]


def test_a_backend_without_a_stages_table_is_refused_with_the_reason(fake_distribution: Path) -> None:
    info = fake_distribution / "fake_npu_backend-0.1.dist-info" / "entry_points.txt"
    info.write_text("[npuctl.backends]\noldnpu = fake_npu_backend:OldBackend\n")
    with pytest.raises(UnsupportedStage, match="declares no `stages` table"):
        registry.backend("oldnpu")
