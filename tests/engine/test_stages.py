"""The stage table: the files a stage key reads are the path fields it reads, each rebased and watched."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from reconciler.engine.chain import build_chain, variants
from reconciler.engine.stages import STAGES
from reconciler.engine.workspace import Workspace
from reconciler.spec import load
from reconciler.spec.pathfields import PATH_FIELDS, PathField
from reconciler.watch.inputs import spec_inputs
from tests.conftest import DIGITS


def _put(tree: dict[str, Any], field: PathField, value: str) -> None:
    for key in field.loc[:-1]:
        tree = tree.setdefault(key, {})
    tree[field.loc[-1]] = value


def _place(repo: Path, field: PathField) -> Path:
    """A file or folder of the field's kind under inputs/ (the model field gets the real model)."""
    where = repo / "inputs" / field.input
    if field.kind == "folder":
        where.mkdir(parents=True)
        shutil.copyfile(DIGITS / "data" / "eval" / "0000.npy", where / "0000.npy")
    elif field.input == "model":
        where.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(DIGITS / "model.onnx", where)
    else:
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_text("0 1\n")
    return where


def test_every_file_a_stage_key_reads_is_rebased_and_watched(git_repo: Path) -> None:
    """Every declared path field, written in a base file in another folder: each stage's key holds the
    digest of exactly the files its definition reads, found where the base's relative path points, and
    watch mode watches each of them. A spec that leaves one of a stage's file inputs unset fails here,
    so a new path field comes with a case that exercises it."""
    repo = git_repo.resolve()
    spec_tree: dict[str, Any] = {
        "target": "cpu",
        "inputs": {"image": [1, 1, 8, 8]},
        "quantization": {"mode": "ptq", "calibration": {"samples": 1}, "sensitive_layers": {"auto": {}}},
        "evaluate": {"task": {"type": "ctc"}},  # the task that names a charset
        "rewrite": {"replace_unsupported": True},  # reads the samples it verifies on
    }
    placed = {}
    for field in PATH_FIELDS:
        placed[field.dotted] = _place(repo, field)
        _put(spec_tree, field, f"../../inputs/{field.input}")  # relative to specs/bases/
    base = {"apiVersion": "npuctl/v1", "kind": "DeploymentBase", "spec": spec_tree}
    (repo / "specs" / "bases").mkdir()
    (repo / "specs" / "bases" / "all.yaml").write_text(json.dumps(base))
    child = "apiVersion: npuctl/v1\nkind: Deployment\nextends: bases/all.yaml\nmetadata: {name: every-path}\n"
    (repo / "specs" / "every.yaml").write_text(child)

    spec = load(repo / "specs" / "every.yaml", repo)
    watched = spec_inputs(spec, repo)
    ws = Workspace.open(repo)
    try:
        chain = build_chain(spec, variants(spec)[0], repo, ws.hasher)
    finally:
        ws.close()
    read = set()
    for setup in chain:
        assert set(setup.files) == set(setup.stage.files), setup.stage.name
        for name, path in setup.files.items():
            field = setup.stage.files[name]
            assert path == placed[field.dotted].resolve(), (setup.stage.name, name)
            assert setup.file_digests[name] is not None
            assert path in watched.files or path in watched.trees, (setup.stage.name, name)
            read.add(field)
    assert read == set(PATH_FIELDS), "a declared path no stage reads"
    assert {f for s in STAGES for f in s.files.values()} == set(PATH_FIELDS)


def test_the_engine_and_the_backends_name_the_same_stages_in_one_order() -> None:
    """Backends never import the engine, so they hold the stage names themselves (backends.sdk.base);
    the engine's table is the definition, and this holds the two together."""
    from backends.sdk.base import STAGES as BACKEND_STAGES
    from reconciler.engine.stages import ORDER

    assert ORDER == BACKEND_STAGES


def test_compile_reads_the_float_model_its_int8_check_judges_against() -> None:
    """The compile check judges an int8 build against the model it was quantized from
    (backends.sdk.artifact_check), so that model is one of compile's inputs and in its key: the one
    quantize reads as its float reference, the one evaluate scores against."""
    from reconciler.engine.stages import BY_NAME

    compile_uses = BY_NAME["compile"].uses
    assert compile_uses["model"] == ("quantize", "model")
    assert (
        compile_uses["float_model"]
        == BY_NAME["quantize"].uses["float_model"]
        == BY_NAME["evaluate"].uses["float_model"]
    )
