"""tools/gen_optables.py: normalization rules, determinism, and reproducing the checked-in files."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]
CATALOG = REPO / "backends" / "catalog"
SHARED = Path(os.environ.get("NPUCTL_OPSUPPORT") or REPO / "tools" / "opsupport")
"""The published op tables the catalog is generated from: checked in (tools/opsupport), or
$NPUCTL_OPSUPPORT to check a newer release against the checked-in catalog."""

HEADER = "onnx_op,supported,constraints,source\n"


def write_csv(folder: Path, name: str, rows: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(HEADER + "".join(r + "\n" for r in rows), encoding="utf-8")
    return path


def test_merge_support(gen: ModuleType) -> None:
    assert gen.merge_support(["yes"]) == "yes"
    assert gen.merge_support(["no", "no"]) == "no"
    assert gen.merge_support(["yes", "partial"]) == "partial"
    assert gen.merge_support(["yes", "no"]) == "partial"


def test_normalize_aliases_domains_and_unmapped(gen: ModuleType) -> None:
    rows = [
        {"onnx_op": "Conv", "supported": "yes", "constraints": "", "source": "S"},
        {"onnx_op": "Gemm / MatMul(const B)", "supported": "partial", "constraints": "FC", "source": "S"},
        {"onnx_op": "Pad", "supported": "yes", "constraints": "constant", "source": "S"},
        {"onnx_op": "Pad (reflect)", "supported": "partial", "constraints": "H/W only", "source": "T"},
        {"onnx_op": "Gelu (com.microsoft)", "supported": "yes", "constraints": "", "source": "S"},
        {
            "onnx_op": "Corr",
            "supported": "yes",
            "constraints": "Ascend-specific / non-standard ONNX op name",
            "source": "S",
        },
        {
            "onnx_op": "Concat of Unsqueeze (TFLite PACK)",
            "supported": "partial",
            "constraints": "x",
            "source": "S",
        },
    ]
    body = gen.normalize(rows, gen.onnx_op_types())
    assert set(body["ops"]) == {"Conv", "Gemm", "MatMul", "Pad"}
    assert body["ops"]["MatMul"]["constraints"].startswith(
        "[source row 'Gemm / MatMul(const B)': only with a constant B]"
    )
    assert body["ops"]["Pad"] == {
        "supported": "partial",
        "constraints": "constant || [source row 'Pad (reflect)': mode=reflect] H/W only",
        "source": "T",
    }
    assert set(body["vendor_ops"]) == {"com.microsoft:Gelu", "vendor:Corr"}
    assert [u["row"] for u in body["unmapped"]] == ["Concat of Unsqueeze (TFLite PACK)"]
    assert body["primary_row_source"] == "S"


def test_unknown_odd_name_is_an_error_not_a_guess(gen: ModuleType) -> None:
    rows = [{"onnx_op": "Conv2D-ish", "supported": "yes", "constraints": "", "source": "S"}]
    with pytest.raises(ValueError, match="not an ONNX op type"):
        gen.normalize(rows, gen.onnx_op_types())


def test_csv_without_metadata_or_with_bad_level_fails(gen: ModuleType, tmp_path: Path) -> None:
    write_csv(tmp_path / "a", "new_vendor.csv", ["Conv,yes,,S"])
    assert gen.main([str(tmp_path / "a"), "--out", str(tmp_path / "out"), "--no-cpu"]) == 1
    write_csv(tmp_path / "b", "qualcomm_qnn_htp.csv", ["Conv,maybe,,S"])
    assert gen.main([str(tmp_path / "b"), "--out", str(tmp_path / "out"), "--no-cpu"]) == 1


def test_version_changes_with_content(gen: ModuleType, tmp_path: Path) -> None:
    known = gen.onnx_op_types()
    one = write_csv(tmp_path / "one", "qualcomm_qnn_htp.csv", ["Conv,yes,,S", "Relu,yes,,S"])
    two = write_csv(tmp_path / "two", "qualcomm_qnn_htp.csv", ["Conv,yes,,S", "Relu,partial,,S"])
    v1 = gen.vendor_table(one, known)["version"]
    v2 = gen.vendor_table(two, known)["version"]
    assert v1 != v2 and v1.startswith("qnn-ep-2.5.0+qairt-2.49.40 (2026-03) sha256:")
    assert gen.vendor_table(one, known)["version"] == v1


def test_sync_targets_and_check(gen: ModuleType, tmp_path: Path) -> None:
    """A table update rewrites every target's op_table_version; --check reports it as stale."""
    catalog = tmp_path / "catalog"
    (catalog / "targets").mkdir(parents=True)
    out = catalog / "optables"
    src = write_csv(tmp_path / "src", "rockchip_rk3588_rknpu2.csv", ["Conv,partial,4-D only,S"])
    for name in ("rk3588", "rv1106"):
        target = {"id": name, "op_table": "rockchip-rknpu2", "op_table_version": "old"}
        (catalog / "targets" / f"{name}.json").write_text(json.dumps(target))
    assert gen.main([str(src.parent), "--out", str(out), "--no-cpu", "--check"]) == 1
    assert gen.main([str(src.parent), "--out", str(out), "--no-cpu"]) == 0
    version = json.loads((out / "rockchip-rknpu2.json").read_text())["version"]
    for name in ("rk3588", "rv1106"):
        assert json.loads((catalog / "targets" / f"{name}.json").read_text())["op_table_version"] == version
    assert gen.main([str(src.parent), "--out", str(out), "--no-cpu", "--check"]) == 0
    write_csv(src.parent, src.name, ["Conv,yes,,S"])
    assert gen.main([str(src.parent), "--out", str(out), "--no-cpu", "--check"]) == 1


def test_target_naming_a_missing_table_is_an_error(gen: ModuleType, tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    (catalog / "targets").mkdir(parents=True)
    (catalog / "targets" / "x.json").write_text(json.dumps({"id": "x", "op_table": "nope"}))
    src = write_csv(tmp_path / "src", "arm_ethos_u85.csv", ["Conv,yes,,S"])
    assert gen.main([str(src.parent), "--out", str(catalog / "optables"), "--no-cpu"]) == 1


def test_generation_is_deterministic(gen: ModuleType) -> None:
    first = gen.generate(SHARED, with_cpu=False)
    second = gen.generate(SHARED, with_cpu=False)
    assert first == second
    assert all(text.endswith("}\n") for text in first.values())


def test_reproduces_the_checked_in_vendor_tables(gen: ModuleType) -> None:
    for name, text in gen.generate(SHARED, with_cpu=False).items():
        assert (CATALOG / "optables" / name).read_text(encoding="utf-8") == text, f"{name} is stale"


def test_check_mode_passes_on_the_repository(gen: ModuleType, tmp_path: Path) -> None:
    """--check on a copy of the catalog: the checked-in tables and target versions are current."""
    copy = tmp_path / "catalog"
    shutil.copytree(CATALOG / "optables", copy / "optables")
    shutil.copytree(CATALOG / "targets", copy / "targets")
    assert gen.main([str(SHARED), "--out", str(copy / "optables"), "--no-cpu", "--check"]) == 0


def test_cpu_table_reproduces_with_the_recorded_versions(gen: ModuleType) -> None:
    import onnx
    import onnxruntime

    recorded = json.loads((CATALOG / "optables" / "cpu.json").read_text())["version"]
    here = f"onnx-{onnx.__version__}+onnxruntime-{onnxruntime.__version__}"
    if not recorded.startswith(here + " "):
        pytest.skip(
            f"cpu table generated with {recorded.split()[0]}; installed {here} (matching versions missing)"
        )
    assert gen.render(gen.cpu_table()) == (CATALOG / "optables" / "cpu.json").read_text(encoding="utf-8")
