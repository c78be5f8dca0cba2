"""The check stage through its StageImpl interface, and the placement table renderer."""

from __future__ import annotations

import io
import json
from pathlib import Path

from npu_models import write_imported
from rich.console import Console
from rich.table import Table

from backends.catalog import target
from backends.passes import SHARED
from backends.passes.check import CheckPass, quantization_config, render_table
from backends.sdk.base import StageRequest


def _request(folder: Path, model: Path, tid: str, config: dict[str, object]) -> StageRequest:
    work = folder / "work"
    work.mkdir(parents=True, exist_ok=True)
    return StageRequest("check", target(tid), config, {"model": model}, work, folder / "check.log")


def test_check_stage_writes_deterministic_placement(tmp_path: Path) -> None:
    model = write_imported("det", tmp_path)
    config = {
        "target": "rk3588",
        "quantization.mode": "ptq",
        "quantization.weights": "int8",
        "quantization.activations": None,
    }
    impl = SHARED["check"].load()
    assert isinstance(impl, CheckPass)
    out = impl.run(_request(tmp_path / "a", model, "rk3588", config))
    again = CheckPass().run(_request(tmp_path / "b", model, "rk3588", config))
    assert out.artifacts["placement"].read_bytes() == again.artifacts["placement"].read_bytes()
    m = out.report["measurements"]
    assert set(m) == {"npu_coverage", "fallback_partitions", "latency_ms.estimate"}
    assert all(v["evidence"] == "estimated" for v in m.values())
    assert 0 < m["npu_coverage"]["value"] <= 1
    assert "roofline" in m["latency_ms.estimate"]["detail"]
    assert (tmp_path / "a" / "check.log").read_text().count("\n") > 10
    assert out.report["precision"]["npu_dtype"] == "int8"


def test_quantization_config_reads_dotted_and_nested_keys() -> None:
    assert quantization_config({"quantization.mode": "fp16"}) == {"mode": "fp16"}
    nested = {"quantization": {"mode": "ptq", "weights": "int8", "activations": "uint16"}}
    assert quantization_config(nested)["activations"] == "uint16"


def test_render_table_has_a_row_per_node(tmp_path: Path) -> None:
    model = write_imported("cls", tmp_path)
    out = CheckPass().run(_request(tmp_path, model, "rk3588", {"quantization.mode": "ptq"}))
    report = json.loads(out.artifacts["placement"].read_text())
    table = render_table(report)
    assert isinstance(table, Table)
    assert table.row_count == len(report["nodes"])
    fallback = render_table(report, only_fallback=True)
    assert fallback.row_count == sum(1 for n in report["nodes"] if n["device"] == "CPU")
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(render_table(report, only_fallback=True, limit=5))
    assert "placement on rk3588" in console.export_text()


def test_the_stage_note_says_where_things_run_in_words() -> None:
    from backends.catalog import target
    from backends.passes.check import placement_note
    from backends.sdk.vocab import NODES_THAT_RUN

    report = {"target": "cpu", "coverage": {"nodes": {"npu": 0, "total": 10}}, "crossings": []}
    expected = f"10 {NODES_THAT_RUN}, all on the CPU (the cpu target has no NPU)"
    assert placement_note(report, target("cpu")) == expected
    npu = {"target": "rk3588", "coverage": {"nodes": {"npu": 8, "total": 10}}, "crossings": [1, 2]}
    expected = f"8/10 {NODES_THAT_RUN} on the NPU, 2 boundary crossing(s) to the CPU"
    assert placement_note(npu, target("rk3588")) == expected
    tabled = {**npu, "source": "op-table rockchip-rknpu2@2.3.2"}
    assert placement_note(tabled, target("rk3588")) == expected + " (npuctl's op table, before compile)"
