"""The compile stage records rknn-toolkit2's own account of its build, on the PP-OCR classifier the
examples ship: a model where npuctl's op table puts its large GlobalAveragePools (and more) on the CPU
and the toolkit runs every compute layer on the NPU (each pool as strided convolutions).

The expected figures are read from the stage log here, with this test's own reading of the table."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rknn_helpers import needs_rknn

from backends.catalog import targets
from backends.passes.check import CheckPass
from backends.rknn.stages import RknnCompile
from backends.sdk.base import StageRequest

pytestmark = [pytest.mark.slow, needs_rknn]

ROW = re.compile(r"\]\s+\d+\s+(\S+)\s+\S+\s+(CPU|NPU)\s+\S+\s+\S+\s+\d+/\d+/(\d+)\s+\S+\s+(\S+)\s*$")


def _cls_model(folder: Path) -> Path:
    """The PP-OCR direction classifier with its input fixed to one 48x192 line."""
    import onnx

    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    assert spec is not None and spec.origin is not None
    model = onnx.load(str(Path(spec.origin).parent / "models/ch_ppocr_mobile_v2.0_cls_infer.onnx"))
    for dim, value in zip(model.graph.input[0].type.tensor_type.shape.dim, (1, 3, 48, 192), strict=True):
        dim.dim_value = value
    path = folder / "cls.onnx"
    onnx.save(model, str(path))
    return path


def _request(stage: str, folder: Path, model: Path) -> StageRequest:
    work = folder / stage
    work.mkdir()
    config = {"target": "rk3588", "compile": {}, "quantization.mode": "none"}
    return StageRequest(stage, targets()["rk3588"], config, {"model": model}, work, folder / f"{stage}.log")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("rknn-account")
    model = _cls_model(folder)
    compiled = RknnCompile().run(_request("compile", folder, model))
    checked = CheckPass().run(_request("check", folder, model))
    log = (folder / "compile.log").read_text(errors="replace")
    rows = [m.groups() for m in map(ROW.search, re.sub(r"\x1b\[[0-9;]*m", "", log).splitlines()) if m]
    sizes = {
        kind: float(value)
        for kind, value in re.findall(r"Total (Internal|Weight) Memory Size: ([\d.]+)KB", log)
    }
    return {"compiled": compiled, "checked": checked, "rows": rows, "sizes": sizes}


def test_coverage_and_placement_are_the_toolkits_where_the_op_table_disagrees(built: dict[str, Any]) -> None:
    compiled, checked, rows = built["compiled"], built["checked"], built["rows"]
    compute = [r for r in rows if r[0] not in ("InputOperator", "OutputOperator")]
    cpu_onnx_types = {r[3].split(":")[0] for r in compute if r[1] == "CPU"}
    assert compute and not cpu_onnx_types - {"Reshape"}  # the toolkit's CPU layers: at most a layout reshape
    measured = compiled.report["measurements"]
    assert measured["npu_coverage"]["evidence"] == "estimated: rknn-toolkit2"
    assert measured["npu_coverage"]["value"] == 1.0
    assert measured["fallback_partitions"]["value"] == 0
    assert compiled.report["placement"]["crossings"]["count"] == 0
    # the op table, before compile, says otherwise; both are recorded and the tool wins
    table_cov = checked.report["coverage"]["nodes"]
    assert table_cov["fraction"] < 1.0
    assert compiled.report["placement"]["op_table_coverage"]["nodes"] == table_cov
    disagree = compiled.report["placement"]["disagreements"]
    assert len(disagree) == table_cov["total"] - table_cov["npu"]
    assert "GlobalAveragePool" in {d["op_type"] for d in disagree}
    assert all(
        d["op_table"] == "CPU" and d["tool"] == "NPU" and d["won"] == "rknn-toolkit2" for d in disagree
    )
    assert "rknn-toolkit2 wins" in compiled.note
    placed = json.loads(Path(compiled.artifacts["tool_placement"]).read_text())
    assert {n["device"] for n in placed["nodes"]} == {"NPU"}


def test_latency_and_memory_are_the_toolkits_cycles_and_memory_plan(built: dict[str, Any]) -> None:
    compiled, rows, sizes = built["compiled"], built["rows"], built["sizes"]
    cycles = sum(int(r[2]) for r in rows)
    clock_mhz = targets()["rk3588"].extra["npu_clock_mhz"]
    latency = compiled.report["measurements"]["latency_ms.estimate"]
    assert latency["evidence"] == "estimated: rknn-toolkit2"
    assert latency["value"] == pytest.approx(cycles / (clock_mhz * 1e3), rel=1e-6)
    memory = compiled.report["measurements"]["peak_memory_mb"]
    assert memory["value"] == pytest.approx((sizes["Internal"] + sizes["Weight"]) * 1024 / 1e6, rel=1e-5)
    assert memory["evidence"] == "estimated: rknn-toolkit2"
