"""The QNN HTP simulator's per-op cycles as a profile of the deployed model: a real simulated run of
the digits CNN (float, which the HTP runs in fp16), its detailed CSV read back and mapped by node name."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest

from backends.catalog import target
from backends.passes import placement
from backends.passes.importer import import_model
from backends.qnn import driver
from backends.qnn.profile import qnn_profile, read_profile
from backends.sdk.base import StageRequest
from tests.conftest import DIGITS, ROOT

pytest.importorskip("onnxruntime_qnn")

HTP = "qualcomm-htp-v75"


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, onnx.ModelProto]:
    job = tmp_path_factory.mktemp("qnn-profile")
    model, _ = import_model(DIGITS / "model.onnx", {"image": [1, 1, 8, 8]}, lambda _: None)
    (job / "model.onnx").write_bytes(model.SerializeToString(deterministic=True))
    (job / "placement.json").write_text(json.dumps(placement.compute(model, target(HTP), {"mode": "none"})))
    rng = np.random.default_rng(0)
    np.savez(job / "samples.npz", s000000_0=rng.standard_normal([1, 1, 8, 8]).astype(np.float32))
    request = {
        "mode": "run",
        "model": "model.onnx",
        "samples": "samples.npz",
        "count": 1,
        "inputs": ["image"],
        "outputs": "outputs.npz",
        "profile": str(job / "profile.csv"),
        "htp_arch": "75",
        "soc_model": "57",
    }
    driver.call(request, job, job / "native.log")
    stage = StageRequest(
        "evaluate",
        target(HTP),
        {"target": HTP},
        {"model": job / "model.onnx", "placement": job / "placement.json"},
        job,
        job / "evaluate.log",
    )
    profile = qnn_profile(read_profile(job / "profile.csv"), stage, "QNN HTP simulator (test)")
    assert profile is not None
    return profile, job / "profile.csv", model


def _csv_ops(path: Path) -> tuple[int, dict[str, int]]:
    """The run's accelerator cycles and each op's, read here from QNN's CSV."""
    total, ops = 0, {}
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if row["Unit of Measurement"] != "CYCLES":
                continue
            if row["Event Identifier"] == "Accelerator (execute) time (cycles)":
                total = int(row["Time"])
            elif row["Event Level"] == "SUB-EVENT":
                ops[row["Event Identifier"].removesuffix(" (cycles)")] = int(row["Time"])
    return total, ops


def test_the_ops_cycles_are_the_simulators_and_sum_to_its_total(simulated) -> None:
    profile, path, _ = simulated
    total, ops = _csv_ops(path)
    assert total > 0 and sum(ops.values()) == total
    assert profile["total_cycles"] == total
    assert sum(layer["cycles"] for layer in profile["layers"]) == total
    assert sorted(layer["cycles"] for layer in profile["layers"]) == sorted(ops.values())
    catalog = json.loads((ROOT / "backends" / "catalog" / "targets" / f"{HTP}.json").read_text())
    clock_hz = catalog["htp_clock_mhz"] * 1e6
    for layer in profile["layers"]:
        assert layer["time_ms"] == pytest.approx(layer["cycles"] / clock_hz * 1e3, abs=1e-6)
    assert profile["evidence"] == "estimated: QNN HTP simulator cycles"
    assert "htp_clock_mhz" in profile["evidence_of"]["time_ms"]
    assert profile["latency_ms"]["timed_p50"] is None, "a simulator measures no latency"


def test_each_op_named_after_a_node_maps_onto_it_and_qnns_own_ops_are_inserted(simulated) -> None:
    profile, path, model = simulated
    nodes = {n.name for n in model.graph.node}
    by_qnn = {layer["executed_by"].rsplit(": ", 1)[1]: layer for layer in profile["layers"]}
    for op in _csv_ops(path)[1]:
        base = re.sub(r"(_token_\d+)?(:OpId_\d+| OpId_\d+)$", "", op)
        layer = by_qnn[op]
        if base in nodes:
            assert layer["onnx_nodes"] == [base] and not layer["inserted"], layer
        else:
            assert layer["onnx_nodes"] == [] and layer["inserted"] == (
                base.split("_")[0] in {"Input", "Output", "Transpose"}
            )
    mapped = {name for layer in profile["layers"] for name in layer["onnx_nodes"]}
    assert {"/conv1/Conv", "/conv2/Conv", "/fc1/Gemm", "/head/Gemm"} <= mapped
    conv = next(layer for layer in profile["layers"] if layer["onnx_nodes"] == ["/conv2/Conv"])
    assert conv["macs"] > 0 and conv["device"] == "NPU" and conv["placement"] == "NPU"
    assert profile["attribution"]["shares"]["cpu_fallback"] == 0.0
    # a float model: the worker runs it in fp16 on the HTP (no Q/DQ node anywhere)
    assert {layer["precision"] for layer in profile["layers"] if layer["onnx_nodes"]} == {"fp16"}
    assert profile["evidence_of"]["precision"].startswith("inferred")
