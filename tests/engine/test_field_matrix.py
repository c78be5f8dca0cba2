"""Generated from the schema: for every leaf field of a spec, changing it rebuilds exactly the stages
that read it and their dependants (fewer where early cutoff applies); metadata rebuilds nothing; an
SLO threshold only re-judges.

The base spec sets every optional section (preprocess folded in, ptq with sensitive layers, ...) so
every leaf exists. Each case copies an applied repository, changes one leaf, applies for real (in
process, real stages), and compares the stages that ran with what the stage table says reads it.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconciler.engine.apply import apply_all
from reconciler.engine.execute import RetryPolicy
from reconciler.engine.plan import plan_all
from reconciler.engine.reporter import Reporter
from reconciler.engine.stages import ORDER, readers
from reconciler.engine.workspace import Workspace
from reconciler.spec import check
from tests.conftest import DIGITS, ROOT, copy_digits, git

SCHEMA = json.loads((ROOT / "schemas" / "deployment.schema.json").read_text())

BASE: dict[str, Any] = {
    "apiVersion": "npuctl/v1",
    "kind": "Deployment",
    "metadata": {"name": "matrix", "labels": {"team": "tests"}, "description": "field matrix"},
    "spec": {
        "model": {"path": "../models/digits.onnx", "version": "v1"},
        "target": "cpu",
        "inputs": {"image": [1, 1, 8, 8]},
        "preprocess": {
            "input": "image",
            "layout": "nhwc",
            "dtype": "uint8",
            "resize": {"height": 8, "width": 8, "mode": "linear", "source_height": 8, "source_width": 8},
            "mean": [0.0],
            "std": [255.0],
        },
        "rewrite": {"replace_unsupported": False, "exclude": []},
        "quantization": {
            "mode": "ptq",
            "weights": "int8",
            "activations": "uint8",
            "per_channel": True,
            "calibration": {"data": "../images/calib", "samples": 20, "method": "minmax", "seed": 0},
            "sensitive_layers": {"keep": "fp32", "op_types": ["Gemm"], "first": 0, "last": 0},
        },
        "compile": {"cores": 1, "optimization_level": 3},
        "evaluate": {
            "data": "../images/eval",
            "labels": "../images/eval/labels.txt",
            "warmup": 0,
            "runs": 3,
        },
        "slo": {
            "latency_ms": {"p50": 1000, "p90": 1000, "p95": 1000, "p99": 1000, "mean": 1000},
            "accuracy": {"min": 0.5, "max_drop": 0.5},
            "size_mb": 10,
            "peak_memory_mb": 4000,
            "npu_coverage": 0.0,
            "max_fallback_partitions": 100,
        },
    },
}

CHANGES: dict[str, Any] = {
    # Values for leaves whose generic change (flip a bool, next enum value, +1) is not a valid spec here.
    "model.path": "../models/digits-copy.onnx",
    "model.package": None,
    "model.sha256": None,
    "model.version": "v2",
    "quantization.placement": "every_op",  # unset in BASE: the generic next enum value is its default
    "target": "rk3588",
    "inputs": {"image": [1, 1, 8, 8], "extra": None},
    "shape_variants": [{"image": [2, 1, 8, 8]}],
    "preprocess.input": None,
    "preprocess.layout": "nchw",
    "preprocess.dtype": "float32",
    "preprocess.color.from": "bgr",
    "preprocess.color.to": "rgb",
    "preprocess.resize.source_height": 9,
    "preprocess.resize.source_width": 9,
    "preprocess.resize.height": 16,
    "preprocess.resize.width": 16,
    "preprocess.mean": [1.0],
    "preprocess.std": [250.0],
    "rewrite.exclude": ["/head/*"],
    "rewrite.disable": ["gelu_decompose"],
    "quantization.mode": "fp16",
    "quantization.weights": "uint8",
    "quantization.activations": "int8",
    "quantization.calibration.data": "../images/calib-copy",
    "quantization.sensitive_layers.nodes": ["/fc1/*"],
    "quantization.sensitive_layers.op_types": ["Gemm", "Conv"],
    "compile.backend": "onnxruntime",
    "compile.options": {"execution_mode": "parallel"},
    "evaluate.runner": "ssh://user@127.0.0.1:1",
    "evaluate.data": "../images/eval-copy",
    "evaluate.labels": "../images/eval-copy/labels.txt",
    "evaluate.metric": "top5",
    "evaluate.task": {"type": "classification", "metric": "top5"},
    "evaluate.timeout_s": 300.0,
}
SKIP: dict[str, str] = {
    "model.package": "a package-relative model is a different file; covered by model.path",
    "model.sha256": "a pin checks the file, it reads nothing new: covered by tests/spec",
    "inputs": "the model has one input: adding one is invalid",
    "preprocess.input": "the model has one input",
    "preprocess.color.from": "a gray model has no other colour order",
    "preprocess.color.to": "a gray model has no other colour order",
}


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        return _resolve(SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[-1]])
    variants = [v for v in node.get("anyOf", []) if v.get("type") != "null"]
    if len(variants) == 1 and ("$ref" in variants[0] or variants[0].get("type") == "object"):
        return _resolve(variants[0])
    return node


def leaves(node: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    """Every leaf field of the spec schema: objects with declared properties are recursed."""
    node = _resolve(node)
    props = node.get("properties")
    if not props:
        return {prefix: node}
    out: dict[str, dict[str, Any]] = {}
    for name, child in props.items():
        out.update(leaves(child, f"{prefix}.{name}" if prefix else name))
    return out


SPEC_LEAVES = leaves(SCHEMA["$defs"]["PartialDeploymentSpec"])
BUILD_LEAVES = sorted(p for p in SPEC_LEAVES if not p.startswith("slo.") and p not in SKIP)
SLO_LEAVES = sorted(p for p in SPEC_LEAVES if p.startswith("slo."))


def _get(data: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        data = data.get(part) if isinstance(data, dict) else None  # type: ignore[assignment]
    return data


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for part in parts[:-1]:
        data = data.setdefault(part, {})
    data[parts[-1]] = value


def changed_value(path: str) -> Any:
    if path in CHANGES:
        return CHANGES[path]
    node = _resolve(SPEC_LEAVES[path])
    current = _get(BASE["spec"], path)
    options = [v for v in node.get("anyOf", [node]) if v.get("type") != "null"]
    kind = options[0]
    if "enum" in kind:
        return next(v for v in kind["enum"] if v != current)
    if kind.get("type") == "boolean":
        return not (current if current is not None else node.get("default"))
    if kind.get("type") == "integer":
        base = current if current is not None else node.get("default") or 1
        return base - 1 if kind.get("maximum") == base else base + 1
    if kind.get("type") == "number":
        base = current if current is not None else node.get("default") or 1.0
        return round(base * 0.999, 6) if base else 0.5
    raise AssertionError(f"no generic change for {path} ({kind}): add it to CHANGES")


def test_every_leaf_is_covered() -> None:
    assert BUILD_LEAVES, "schema walk found leaves"
    for path in BUILD_LEAVES + SLO_LEAVES:
        assert changed_value(path) != _get(BASE["spec"], path), path


@pytest.fixture(scope="module")
def applied_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("matrix") / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "specs").mkdir()
    copy_digits(repo, eval_samples=10, calib_samples=0)
    shutil.copyfile(repo / "models" / "digits.onnx", repo / "models" / "digits-copy.onnx")
    for kind, count in (("calib", 25), ("eval", 10)):
        names = sorted(p.name for p in (DIGITS / "images" / kind).glob("*.png"))[:count]
        for folder in (kind, f"{kind}-copy"):
            (repo / "images" / folder).mkdir(parents=True)
            for name in names:
                shutil.copyfile(DIGITS / "images" / kind / name, repo / "images" / folder / name)
            if kind == "eval":
                wanted = set(names)
                lines = (DIGITS / "images" / kind / "labels.txt").read_text().splitlines()
                keep = [ln for ln in lines if ln.split()[0] in wanted]
                (repo / "images" / folder / "labels.txt").write_text("\n".join(keep) + "\n")
    (repo / "specs" / "matrix.yaml").write_text(yaml.safe_dump(BASE, sort_keys=False))
    results = _apply(repo)
    assert results["sync"] == "Synced" and not results["errors"], results
    return repo


def _apply(repo: Path) -> dict[str, Any]:
    reports = check([repo / "specs"], repo)
    errors = [str(e) for r in reports for e in r.errors]
    assert not errors, errors
    ws = Workspace.open(repo)
    try:
        [result] = apply_all(ws, [r.spec for r in reports], Reporter(), RetryPolicy(retries=0))
    finally:
        ws.close()
    return result.to_json()


def _plan(repo: Path) -> dict[str, Any]:
    reports = check([repo / "specs"], repo)
    ws = Workspace.open(repo)
    try:
        [result] = plan_all(ws, [r.spec for r in reports])
    finally:
        ws.close()
    return result.to_json()


def _mutated(applied_base: Path, tmp_path: Path, path: str, value: Any) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(applied_base, repo, symlinks=True)
    spec = copy.deepcopy(BASE)
    _set(spec, path, value)
    (repo / "specs" / "matrix.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return repo


def _get_spec(path: str) -> dict[str, Any]:
    """The mutated spec section, for the stage table's conditional reads."""
    spec = copy.deepcopy(BASE)
    _set(spec, f"spec.{path}", changed_value(path))
    return dict(spec["spec"])


def _default_stages(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in result["stages"] if s["variant"] == "default"}


@pytest.mark.slow
@pytest.mark.parametrize("path", BUILD_LEAVES)
def test_changing_a_field_rebuilds_its_readers_and_at_most_their_dependants(
    applied_base: Path, tmp_path: Path, path: str
) -> None:
    repo = _mutated(applied_base, tmp_path, f"spec.{path}", changed_value(path))
    direct = set(readers(path, _get_spec(path)))
    if not direct:  # read by no stage of this chain (a label, or another variant's chain)
        planned = _default_stages(_plan(repo))
        assert {s["action"] for n, s in planned.items() if n in ORDER} == {"cached"}, path
        return
    first = min(ORDER.index(s) for s in direct)
    allowed = direct | set(ORDER[first:])
    planned = _default_stages(_plan(repo))
    planned_build = {n for n, s in planned.items() if s["action"] == "build" and n in ORDER}
    assert direct <= planned_build, f"{path}: every reader must be planned"
    assert planned_build <= allowed, f"{path}: plan rebuilds readers and dependants, nothing upstream"
    done = _default_stages(_apply(repo))
    ran = {n for n, s in done.items() if s["action"] != "cached" and n in ORDER}
    assert direct <= ran | {n for n, s in done.items() if s["action"] == "skipped"}, f"{path}: {done}"
    assert ran <= allowed, f"{path}: rebuilt {sorted(ran - allowed)} which neither read it nor depend on it"
    assert all(done[n]["action"] == "cached" for n in ORDER[:first]), f"{path}: upstream must stay cached"


@pytest.mark.slow
@pytest.mark.parametrize("path", SLO_LEAVES)
def test_changing_an_slo_only_rejudges(applied_base: Path, tmp_path: Path, path: str) -> None:
    repo = _mutated(applied_base, tmp_path, f"spec.{path}", changed_value(path))
    planned = _plan(repo)
    actions = {s["name"]: s["action"] for s in planned["stages"]}
    assert actions.pop("verify") == "rejudge", path
    assert set(actions.values()) == {"cached"}, f"{path}: {actions}"


@pytest.mark.slow
@pytest.mark.parametrize("path", ["metadata.labels", "metadata.description"])
def test_changing_metadata_rebuilds_nothing(applied_base: Path, tmp_path: Path, path: str) -> None:
    repo = _mutated(applied_base, tmp_path, path, {"team": "other"} if path.endswith("labels") else "edited")
    planned = _plan(repo)
    assert {s["action"] for s in planned["stages"]} == {"cached"}


@pytest.mark.slow
def test_early_cutoff_a_change_with_identical_output_stops_the_rebuild(
    applied_base: Path, tmp_path: Path
) -> None:
    """A fusion switch is read by rewrite (idle here: a new key, the same model) and by compile: the
    stages between them are not rebuilt, although they depend on rewrite."""
    repo = _mutated(applied_base, tmp_path, "spec.rewrite.fusion.matmul_add", False)
    done = _default_stages(_apply(repo))
    assert done["rewrite"]["action"] == "built"
    assert done["preprocess"]["action"] == "cached"
    assert done["quantize"]["action"] == "cached"
    assert done["compile"]["action"] == "built"
