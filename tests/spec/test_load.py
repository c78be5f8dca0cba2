"""Loading specs: the LoadedSpec API, extends, discovery, and many specs at once."""

from __future__ import annotations

from pathlib import Path

import pytest

import backends.catalog
from reconciler.spec import SpecErrors, check, discover, load, load_all
from tests.spec.conftest import GOOD, GOOD_CLS, Repo, edit


def test_loaded_spec_fields_and_positions(repo: Repo) -> None:
    path = repo.write("specs/a.yaml", GOOD)
    spec = load(path, repo.root)
    assert spec.path == path.resolve() and spec.sources == (path.resolve(),)
    assert (spec.name, spec.target) == ("squeeze-cpu", "cpu")
    assert spec.field("quantization.calibration.data") == "../data/calib"
    assert spec.field("quantization.calibration") == {
        "data": "../data/calib", "samples": 8, "method": "minmax", "percentile": 99.999, "seed": 0,
    }  # fmt: skip
    assert spec.field("inputs.data_0") == [1, 3, 224, 224]
    assert spec.field("preprocess.color") is None  # parent is None
    assert spec.field("compile.cores") is None
    with pytest.raises(KeyError):
        spec.field("quantization.calibrate")
    assert spec.position("quantization.calibration.samples") == (path.resolve(), 15, 16)
    assert spec.position("inputs.data_0.2") == (path.resolve(), 10, 20)
    assert spec.position("inputs.data_0", key=True) == (path.resolve(), 10, 5)
    # a field left at its default points at the nearest written ancestor
    assert spec.position("quantization.calibration.seed") == (path.resolve(), 14, 7)
    assert spec.position("compile.batch")[1:] == (6, 3)  # `spec` has no key above it: its first entry


def test_field_values_are_shared_not_copied(repo: Repo) -> None:
    """No copy on read (a plan reads thousands of fields); the engine never modifying them is checked
    in tests/e2e/test_noop_writes_nothing.py."""
    spec = load(repo.write("specs/a.yaml", GOOD), repo.root)
    assert spec.field("inputs") is spec.field("inputs")
    assert spec.field("inputs.data_0") == [1, 3, 224, 224]


def test_input_names_with_dots(repo: Repo) -> None:
    text = edit(GOOD, {10: '    "input.1": [1, 3, 224, 224]'})
    spec = load(repo.write("specs/a.yaml", text), repo.root)
    assert spec.field("inputs.input.1") == [1, 3, 224, 224]
    assert spec.position("inputs.input.1.3")[1:] == (10, 28)


def test_every_error_of_a_spec_is_reported_at_once(repo: Repo) -> None:
    text = edit(
        GOOD,
        {
            4: "  name: Bad",
            8: "  target: rk3599",
            12: "    mode: ptg",
            15: "      smaples: 0",
            22: "    runs: -1",
        },
    )
    with pytest.raises(SpecErrors) as caught:
        load(repo.write("specs/a.yaml", text), repo.root)
    where = [(e.line, e.field) for e in caught.value.errors]
    assert where == [
        (4, "metadata.name"),
        (8, "spec.target"),
        (12, "spec.quantization.mode"),
        (15, "spec.quantization.calibration.smaples"),
        (22, "spec.evaluate.runs"),
    ]


def test_semantic_errors_are_all_reported(repo: Repo) -> None:
    text = edit(
        GOOD, {10: "    data_0: [1, 3, 224]", 17: '      nodes: ["/x/*"]', 18: "      op_types: [Gelu]"}
    )
    (report,) = check([repo.write("specs/a.yaml", text)], repo.root)
    assert [(e.line, e.field) for e in report.errors] == [
        (10, "spec.inputs.data_0"),
        (17, "spec.quantization.sensitive_layers.nodes.0"),
        (18, "spec.quantization.sensitive_layers.op_types.0"),
    ]


def test_one_broken_spec_never_stops_the_others(repo: Repo) -> None:
    repo.write("specs/a.yaml", GOOD)
    repo.write("specs/b.yaml", "apiVersion: npuctl/v1\nkind: Deployment\nmetadata: {name: [}\n")
    repo.write("specs/c.yaml", GOOD_CLS)
    repo.write("specs/d.yaml", edit(GOOD, {4: "  name: other", 8: "  target: nope"}))
    specs, errors = load_all([repo.root / "specs"], repo.root)
    assert [s.name for s in specs] == ["squeeze-cpu", "cls-cpu"]
    assert sorted({Path(e.file).name for e in errors}) == ["b.yaml", "d.yaml"]
    reports = check([repo.root / "specs"], repo.root)
    assert [(r.file.name, r.name, r.valid) for r in reports] == [
        ("a.yaml", "squeeze-cpu", True),
        ("b.yaml", None, False),
        ("c.yaml", "cls-cpu", True),
        ("d.yaml", "other", False),
    ]


def test_names_are_unique(repo: Repo) -> None:
    repo.write("specs/a.yaml", GOOD)
    repo.write("specs/b.yaml", GOOD)
    repo.write("specs/c.yaml", GOOD.replace("squeeze-cpu", "other"))
    specs, errors = load_all([repo.root / "specs"], repo.root)
    assert [s.path.name for s in specs] == ["c.yaml"]  # neither claimant is built
    assert [str(e) for e in errors] == [
        "specs/a.yaml:4:9: metadata.name: name 'squeeze-cpu' is also claimed by specs/b.yaml:4: neither spec is built",
        "specs/b.yaml:4:9: metadata.name: name 'squeeze-cpu' is also claimed by specs/a.yaml:4: neither spec is built",
    ]
    # naming one file still sees the spec beside it (watch applies one file at a time)
    specs, errors = load_all([repo.root / "specs" / "b.yaml"], repo.root)
    assert specs == [] and "claimed by specs/a.yaml:4" in str(errors[0])


def test_missing_path_is_an_error_not_a_crash(repo: Repo) -> None:
    with pytest.raises(SpecErrors, match=r"specs/nothere\.yaml: no such file or directory"):
        discover([Path("specs/nothere.yaml")], repo.root)
    repo.write("specs/a.yaml", GOOD)
    specs, errors = load_all([Path("specs/nothere.yaml"), Path("specs/a.yaml")], repo.root)
    assert [s.name for s in specs] == ["squeeze-cpu"] and len(errors) == 1


def test_discover_rules(repo: Repo) -> None:
    repo.write("specs/a.yaml", GOOD)
    repo.write("specs/b.yml", GOOD_CLS)
    repo.write("specs/base.yaml", "apiVersion: npuctl/v1\nkind: DeploymentBase\n")
    repo.write("specs/quoted-base.yaml", "apiVersion: npuctl/v1\nkind: 'DeploymentBase'\n")
    repo.write("specs/.hidden.yaml", GOOD)
    repo.write("specs/ci.yaml", "kind: Workflow\njobs: {}\n")  # foreign YAML
    repo.write("specs/typo.yaml", "apiVersion: npuctl/v1\nkind: Deploymnet\n")  # ours, invalid: reported
    repo.write("specs/nokind.yaml", "apiVersion: npuctl/v1\n")  # broken: reported, never skipped
    repo.write("specs/notes.txt", "kind: Deployment\n")
    repo.write("specs/sub/deep.yaml", GOOD)  # not scanned: sub-folders hold bases, data, models
    found = [p.name for p in discover([repo.root / "specs"], repo.root)]
    assert found == ["a.yaml", "b.yml", "nokind.yaml", "typo.yaml"]
    # an explicit file is taken as given, except a base
    explicit = discover(
        [Path("specs/ci.yaml"), Path("specs/base.yaml"), Path("specs/sub/deep.yaml")], repo.root
    )
    assert [p.name for p in explicit] == ["ci.yaml", "deep.yaml"]
    # duplicates collapse
    assert len(discover([Path("specs/a.yaml"), repo.root / "specs"], repo.root)) == 4


def test_a_base_cannot_be_loaded_as_a_spec(repo: Repo) -> None:
    path = repo.write("specs/base.yaml", "apiVersion: npuctl/v1\nkind: DeploymentBase\n")
    with pytest.raises(SpecErrors, match=r"base.yaml:2:7: kind: a DeploymentBase is a partial spec"):
        load(path, repo.root)


def test_root_must_be_a_mapping(repo: Repo) -> None:
    with pytest.raises(SpecErrors, match=r"a.yaml:1:1: a spec must be a mapping"):
        load(repo.write("specs/a.yaml", "- a\n- b\n"), repo.root)


def test_unknown_target_with_a_monkeypatched_catalog(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    real = backends.catalog.targets()
    monkeypatch.setattr(backends.catalog, "targets", lambda: {"cpu": real["cpu"], "npu-x": real["cpu"]})
    with pytest.raises(SpecErrors, match="unknown target 'rk3588'; known targets: cpu, npu-x"):
        load(repo.write("specs/a.yaml", edit(GOOD, {8: "  target: rk3588"})), repo.root)


def test_real_catalog_ids_are_accepted(repo: Repo) -> None:
    for target in ("cpu", "rk3588"):
        spec = load(
            repo.write(
                f"specs/{target}.yaml", edit(GOOD, {4: f"  name: s-{target}", 8: f"  target: {target}"})
            ),
            repo.root,
        )
        assert spec.target == target
