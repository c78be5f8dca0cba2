"""Stage registrations (backends.sdk.registration) against the implementations they name.

A registration is a stage's key identity, written once; this checks that it describes the real
implementation: the class it loads is the one its name has always named, and its fingerprint recipe
reads what the implementation's own `fingerprint()` says. Reading an identity imports no toolchain
when the recipe can say it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from backends import registry
from backends.catalog import targets
from backends.passes import SHARED
from backends.sdk.errors import BackendError
from backends.sdk.host import int8_fingerprint
from backends.sdk.registration import Call, Dist, Registration, by_stage

ROOT = Path(__file__).resolve().parents[2]

MOVED: dict[str, str] = {
    "backends.onnx.importer.ImportPass": "backends.passes.importer.ImportPass",
    "backends.onnx.check.CheckPass": "backends.passes.check.CheckPass",
    "backends.onnx.rewrite.RewritePass": "backends.passes.rewrite.stage.RewritePass",
    "backends.onnx.preprocess.PreprocessPass": "backends.passes.preprocess.stage.PreprocessPass",
    "backends.onnx.quantize.QuantizePass": "backends.passes.quant.stage.QuantizePass",
    "backends.sdk.BundleEvaluate": "backends.sdk.vendor_bundle.BundleEvaluate",
}
"""Registered name -> the class's dotted path now, for a class moved after its name entered lock files
(its name stays, so no key moves). Every other name is its class's dotted path."""


def _registrations() -> list[tuple[str, Registration]]:
    found = [("shared", r) for r in SHARED.values()]
    for name in sorted(registry.BUILTIN):
        found += [(name, r) for r in registry.backend(name).stages.values()]
    return found


@pytest.mark.parametrize(("owner", "registration"), _registrations(), ids=lambda v: getattr(v, "stage", v))
def test_each_registration_describes_its_implementation(owner: str, registration: Registration) -> None:
    impl = registration.load()
    assert impl.stage == registration.stage, owner
    where = f"{type(impl).__module__}.{type(impl).__qualname__}"
    assert MOVED.get(registration.name, registration.name) == where, f"{owner}: a name is its class's path"
    assert not hasattr(impl, "version"), f"{owner}: the version is the registration's alone"
    recipe = registration.recipe_fingerprint()
    if recipe is not None:
        assert recipe == impl.fingerprint(), (
            f"{owner}/{registration.stage}: the recipe reads another fingerprint"
        )
    assert registration.identity() == {
        "name": registration.name,
        "version": registration.version,
        "fingerprint": impl.fingerprint(),
    }


def test_the_registry_resolves_stages_from_registrations() -> None:
    cpu, rk = targets()["cpu"], targets()["rk3588"]
    own = registry.backend("onnxruntime").stages
    assert registry.registration(cpu, "compile") is own["compile"]
    assert registry.registration(cpu, "import") is SHARED["import"], "a stage the backend lacks is shared"
    assert registry.registration(rk, "compile", "onnxruntime") is own["compile"], "compile.backend wins"
    with pytest.raises(BackendError):
        registry.registration(cpu, "verify")


def test_identity_is_what_the_import_gives() -> None:
    cpu = targets()["cpu"]
    for stage in ("import", "check", "rewrite", "preprocess", "quantize", "compile", "evaluate"):
        found = registry.registration(cpu, stage)
        impl = registry.implementation(cpu, stage)
        assert type(impl) is type(found.load())
        assert registry.identity(cpu, stage) == {
            "name": found.name,
            "version": found.version,
            "fingerprint": impl.fingerprint(),
        }


def test_identities_with_a_recipe_import_no_toolchain() -> None:
    """plan computes these keys without importing onnx, numpy or any runtime (checked in a fresh
    interpreter: this one has them all)."""
    code = textwrap.dedent(
        """
        import json, sys
        from backends import registry
        from backends.passes import SHARED
        tables = [SHARED] + [registry.backend(n).stages for n in sorted(registry.BUILTIN)]
        read = [r.identity() for t in tables for r in t.values() if r.fingerprint is not None]
        heavy = {"onnx", "onnxruntime", "numpy", "openvino", "nncf", "tensorflow", "torch"}
        print(len(read), json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    count, imported = done.stdout.split(maxsplit=1)
    assert int(count) >= len(SHARED) and json.loads(imported) == []


def test_recipe_parts() -> None:
    assert Dist("no-such-distribution-xyz").read() == {"no-such-distribution-xyz": "missing"}
    assert Dist("no-such-distribution-xyz", "shared.").read() == {
        "shared.no-such-distribution-xyz": "missing"
    }
    assert Call(lambda: {"a": "1"}, "p.").read() == {"p.a": "1"}
    assert Call("backends.sdk.host:int8_fingerprint").read() == int8_fingerprint()
    made = Registration(
        "check", name="n", version="v", ref="r", fingerprint=(Call(lambda: {"a": "1"}), Dist("x-none"))
    )
    assert made.recipe_fingerprint() == {"a": "1", "x-none": "missing"}
    assert Registration("check", name="n", version="v", ref="r").recipe_fingerprint() is None


def test_one_registration_per_stage() -> None:
    one = Registration("check", name="a", version="1", ref="m:A")
    assert by_stage(one) == {"check": one}
    with pytest.raises(ValueError, match="one registration per stage"):
        by_stage(one, Registration("check", name="b", version="1", ref="m:B"))
