"""`npuctl targets`: the catalog table, one target in full, JSON output, and unknown names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner, Result

from backends.catalog import op_table, targets
from reconciler.cli import cli

REPO = Path(__file__).resolve().parents[2]


def run(*args: str) -> Result:
    """Without COLUMNS (pytest-xdist's workers set 80): the piped width is the command's own default."""
    return CliRunner().invoke(cli, ["targets", *args], standalone_mode=False, env={"COLUMNS": None})


def test_lists_every_target_as_plain_text() -> None:
    result = run()
    assert result.exception is None and result.return_value == 0
    assert "\x1b[" not in result.output, "no ANSI escapes when stdout is not a terminal"
    for header in ("id", "vendor", "chip", "NPU", "backend", "INT8 TOPS", "FP16 TOPS", "GB/s", "cores"):
        assert header in result.output
    for target_id in targets():
        assert target_id in result.output
    assert "rknn-toolkit2-2.3.2" in result.output


def test_one_target_in_full_with_op_support_counts() -> None:
    result = run("rk3588")
    assert result.return_value == 0
    out = result.output
    assert "RK3588" in out and "rockchip-rknpu2" in out and "share the rockchip-rknpu2 table" in out
    assert op_table("rockchip-rknpu2").version in out
    counts = op_table("rockchip-rknpu2").counts()
    header = next(line for line in out.splitlines() if "partial" in line and "unknown" in line)
    values = out.splitlines()[out.splitlines().index(header) + 2].split()
    values = [v for v in values if v.isdigit()]
    assert values == [str(counts[k]) for k in ("yes", "partial", "no", "unknown")]


def test_json_catalog() -> None:
    result = run("--json")
    doc = json.loads(result.output)
    assert doc["format_version"] == 1
    assert {t["id"] for t in doc["targets"]} == set(targets())
    rk = next(t for t in doc["targets"] if t["id"] == "rk3588")
    assert rk["peak_tops_int8"] == 6.0 and rk["npu_cores"] == 3 and rk["backend"] == "rknn"
    assert rk["op_table_version"] == op_table("rockchip-rknpu2").version
    assert sum(rk["op_support"].values()) == len(op_table("rockchip-rknpu2").ops)
    assert rk["extra"]["source"]


def test_json_one_target() -> None:
    doc = json.loads(run("intel-npu", "--json").output)
    assert doc["format_version"] == 1
    assert doc["target"]["id"] == "intel-npu" and doc["target"]["op_support"]["unknown"] > 0


def test_unknown_target_one_line_with_suggestion_exit_1() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from reconciler.cli import main; main()", "targets", "rk358"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown target 'rk358'" in lines[0] and "did you mean 'rk3588'" in lines[0]


def test_unknown_target_without_close_match() -> None:
    result = run("zzzzzzzz")
    assert result.return_value == 1
    assert "did you mean" not in (result.stderr or "")


def test_markdown_matches_docs_targets_md() -> None:
    """docs/targets.md is the README's target list: regenerate it with `npuctl targets --format markdown`."""
    result = run("--format", "markdown")
    assert result.return_value == 0
    assert result.output == (REPO / "docs" / "targets.md").read_text(encoding="utf-8")
    for target_id in targets():
        assert f"| `{target_id}` |" in result.output


def test_catalog_says_what_builds_each_target_here() -> None:
    from backends import registry

    result = CliRunner().invoke(cli, ["targets"], standalone_mode=False, env={"COLUMNS": "400"})
    table = result.output.split("built here by", 1)[1]
    for t in targets().values():
        row = next(line for line in table.splitlines() if line.startswith(t.id + " "))
        here = registry.describe(t)
        assert here["backend"] == t.backend and t.backend in row and here["evidence"] in row
    doc = json.loads(run("--json").output)
    rk = next(t for t in doc["targets"] if t["id"] == "rk3588")
    assert rk["built_by"]["backend"] == "rknn" and "simulator" in rk["built_by"]["evidence"]
