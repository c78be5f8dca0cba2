"""A voice-activity-like model (LSTMs inside the branches of an `If`, an int64 scalar sample-rate input):
`npuctl init` writes the scalar, validate accepts it, apply builds it, and check counts the nodes and
MACs inside the branches (the expected numbers computed here from the model's own weights)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx
import yaml

from tests.conftest import git, run_npuctl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "passes"))
from vad_model import save_vad


def _lstm_macs(node: onnx.NodeProto, graph: onnx.GraphProto, seq: int, batch: int) -> int:
    """Gate MACs of one forward LSTM step times the sequence: 4 gates x hidden x (input + hidden)."""
    weights = {t.name: list(t.dims) for t in graph.initializer}
    _, four_hidden, features = weights[node.input[1]]
    hidden = four_hidden // 4
    return seq * batch * 4 * hidden * (features + hidden)


def _expected(model: onnx.ModelProto) -> tuple[int, int]:
    """(runtime nodes including both branches, MACs of the costlier branch), counted from the proto."""
    main = model.graph
    x = next(i for i in main.input if i.name == "x")
    seq, batch = (d.dim_value for d in x.type.tensor_type.shape.dim[:2])
    branch_nodes, branch_macs = 0, []
    for node in main.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                branch_nodes += len(attr.g.node)
                macs = 0
                for inner in attr.g.node:
                    if inner.op_type == "LSTM":
                        macs += _lstm_macs(inner, attr.g, seq, batch)
                    if inner.op_type == "MatMul":
                        weights = {t.name: list(t.dims) for t in attr.g.initializer}
                        macs += batch * weights[inner.input[1]][0] * weights[inner.input[1]][1]
                branch_macs.append(macs)
    return len(main.node) + branch_nodes, max(branch_macs)


def test_if_bodies_are_counted_and_a_scalar_input_applies(git_repo: Path) -> None:
    models = git_repo / "models"
    models.mkdir()
    path = save_vad(models / "vad.onnx")
    done = run_npuctl(git_repo, "init", "models/vad.onnx", "--target", "cpu", "--name", "vad")
    assert done.returncode == 0, done.stderr + done.stdout
    spec_path = git_repo / "specs" / "vad.yaml"
    text = spec_path.read_text()
    assert "    sr: scalar  # rank 0" in text.splitlines(), text
    assert yaml.safe_load(text)["spec"]["inputs"] == {"x": [8, 1, 16], "sr": "scalar"}
    # init leaves the SLO budgets to the user (FIXME placeholders fail validate): fill them in
    spec_path.write_text(
        text.replace("{p90: FIXME}", "{p90: 1000}").replace("{max_drop: FIXME}", "{max_drop: 0.5}")
    )

    assert run_npuctl(git_repo, "validate").returncode == 0
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-qm", "vad")
    done = run_npuctl(git_repo, "apply", "--json")
    assert done.returncode in (0, 3), done.stderr + done.stdout
    (spec,) = json.loads(done.stdout)["specs"]
    actions = {s["name"]: s["action"] for s in spec["stages"]}
    assert set(actions.values()) <= {"built", "cached"}, spec["stages"]  # built and measured end to end
    measured = lock_measurements(git_repo)
    assert measured["latency_ms.p50"]["evidence"] == "measured:host"

    coverage = measured["npu_coverage"]["detail"]
    nodes, macs = _expected(onnx.load(str(path)))
    assert f"/{nodes} nodes" in coverage, coverage
    check = _check_report(git_repo)
    assert check["coverage"]["nodes"]["total"] == nodes
    assert check["coverage"]["macs"]["total"] == macs


def test_a_scalar_fed_from_evaluation_data_builds_for_onnx_runtime_and_openvino(git_repo: Path) -> None:
    """The scalar comes from .npz samples this time (evaluate.data), through every stage that feeds the
    model: the compile checks of ONNX Runtime and of OpenVINO (which refuses a [1] for a [] input)."""
    import numpy as np

    models, data = git_repo / "models", git_repo / "data" / "vad"
    models.mkdir()
    data.mkdir(parents=True)
    save_vad(models / "vad.onnx")
    rng = np.random.default_rng(0)
    for i in range(3):
        x = rng.normal(0, 1, (8, 1, 16)).astype(np.float32)
        np.savez(data / f"s{i}.npz", x=x, sr=np.array(16000, np.int64))
    for target in ("cpu", "intel-npu"):
        (git_repo / "specs" / f"vad-{target}.yaml").write_text(
            "apiVersion: npuctl/v1\nkind: Deployment\nmetadata: {name: vad-" + target + "}\nspec:\n"
            "  model: {path: ../models/vad.onnx, version: v1}\n  target: " + target + "\n"
            "  inputs: {x: [8, 1, 16], sr: scalar}\n"
            "  evaluate: {data: ../data/vad, task: {type: classification}, warmup: 1, runs: 3}\n"
            "  slo: {accuracy: {max_drop: 0.5}}\n"
        )
    assert run_npuctl(git_repo, "validate").returncode == 0
    done = run_npuctl(git_repo, "apply", "--json")
    assert done.returncode in (0, 3), done.stderr + done.stdout
    for spec in json.loads(done.stdout)["specs"]:
        actions = {s["name"]: (s["action"], s["reason"]) for s in spec["stages"]}
        assert actions["compile"][0] == "built" and actions["evaluate"][0] == "built", (spec["name"], actions)


def test_placement_lists_the_branch_nodes(tmp_path: Path) -> None:
    from backends.catalog import target
    from backends.passes import placement

    model = onnx.load(str(save_vad(tmp_path / "vad.onnx")))
    report = placement.compute(model, target("rk3588"), {"mode": "none"})
    nodes, macs = _expected(model)
    inside = [n for n in report["nodes"] if n.get("inside") == "by_rate"]
    assert len(report["nodes"]) == nodes and len(inside) == nodes - len(model.graph.node)
    assert [n["op_type"] for n in inside].count("LSTM") == 2
    assert all(n["name"].startswith(("by_rate/then_branch/", "by_rate/else_branch/")) for n in inside)
    assert report["coverage"]["macs"]["total"] == macs
    assert report["estimate"]["latency_ms"] > 0


def lock_measurements(repo: Path) -> dict:
    lock = json.loads((repo / "specs" / "vad.lock.json").read_text())
    found: dict = lock["variants"]["default"]["measurements"]
    return found


def _check_report(repo: Path) -> dict:
    """The check stage's recorded report (the engine's SQLite state, read as any tool would)."""
    import sqlite3

    db = sqlite3.connect(repo / ".npuctl" / "state.db")
    try:
        (row,) = db.execute("SELECT report FROM records WHERE stage = 'check'").fetchall()
    finally:
        db.close()
    report: dict = json.loads(row[0])
    return report
