"""The target catalog: every target complete, sourced, and pointing at an op table of the same version."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from types import ModuleType

import pytest

from backends.catalog import SUPPORT_LEVELS, Target, did_you_mean, op_table, op_tables, target, targets

REPO = Path(__file__).resolve().parents[3]
CATALOG = REPO / "backends" / "catalog"
REQUIRED_IDS = {
    "cpu",
    "qualcomm-htp-v75",
    "mediatek-mdla3",
    "ascend-310p",
    "apple-ane",
    "rk3588",
    "rk3576",
    "rk3566",
    "rk3562",
    "rv1106",
    "intel-npu",
    "ethos-u55",
    "ethos-u85",
}
REQUIRED_VENDORS = {"Qualcomm", "MediaTek", "Huawei", "Apple", "Rockchip", "Intel", "Arm"}
BACKENDS = {"onnxruntime", "qnn", "mediatek", "cann", "coreml", "rknn", "openvino", "ethos-u"}
PRECISIONS = {"fp32", "fp16", "bf16", "tf32", "int4", "int8", "uint8", "int16", "uint16"}
ACTIVATIONS = {"int8", "uint8", "int16", "uint16"}
BASIS_KINDS = {"published", "derived", "measured", "nominal", "typical board", "assumed", "third-party"}
"""How a figure was obtained: every number in the catalog says which."""
NUMERIC = ("peak_tops_int8", "peak_tops_fp16", "bandwidth_gbps", "cpu_gflops")


def all_targets() -> list[Target]:
    return list(targets().values())


def test_required_targets_and_vendors_present() -> None:
    assert set(targets()) >= REQUIRED_IDS
    assert {t.vendor for t in all_targets()} >= REQUIRED_VENDORS


def test_file_name_is_the_id() -> None:
    for path in (CATALOG / "targets").glob("*.json"):
        assert json.loads(path.read_text())["id"] == path.stem


@pytest.mark.parametrize("t", all_targets(), ids=lambda t: t.id)
def test_a_stated_opset_ceiling_has_its_basis(t: Target) -> None:
    if t.max_opset is None:
        return
    assert 7 <= t.max_opset <= 30
    assert t.extra["basis"]["max_opset"].split(":")[0] in BASIS_KINDS


@pytest.mark.parametrize("t", all_targets(), ids=lambda t: t.id)
def test_every_field_filled(t: Target) -> None:
    for f in fields(Target):
        if f.name == "extra" or f.default is None:  # optional facts: None where not stated
            continue
        value = getattr(t, f.name)
        assert value is not None and value != "", f"{t.id}.{f.name} is empty"
    assert t.backend in BACKENDS
    assert set(t.precisions) <= PRECISIONS and t.precisions
    assert t.default_activation in ACTIVATIONS
    assert t.peak_tops_int8 > 0 and t.bandwidth_gbps > 0 and t.cpu_gflops > 0
    assert t.peak_tops_fp16 >= 0 and t.npu_cores >= 0
    assert (t.peak_tops_fp16 > 0) == ("fp16" in t.precisions), f"{t.id}: fp16 TOPS vs precisions"
    assert len(t.description) > 40


@pytest.mark.parametrize("t", all_targets(), ids=lambda t: t.id)
def test_every_figure_has_a_source_and_a_basis(t: Target) -> None:
    sources = t.extra.get("source")
    assert isinstance(sources, list) and sources and all(isinstance(s, str) and s for s in sources)
    basis = t.extra.get("basis")
    assert isinstance(basis, dict) and set(NUMERIC) <= set(basis)
    for key in NUMERIC:
        assert basis[key].split(":")[0] in BASIS_KINDS, (t.id, key)


@pytest.mark.parametrize("t", all_targets(), ids=lambda t: t.id)
def test_op_table_exists_and_versions_match(t: Target) -> None:
    table = op_table(t.op_table)
    assert table.id == t.op_table
    assert t.op_table_version == table.version


def test_rockchip_targets_share_the_rknpu2_table_and_say_so() -> None:
    rockchip = [t for t in all_targets() if t.vendor == "Rockchip"]
    assert {t.id for t in rockchip} >= {"rk3588", "rk3576", "rk3566", "rk3562", "rv1106"}
    for t in rockchip:
        assert t.op_table == "rockchip-rknpu2" and t.backend == "rknn" and t.default_activation == "int8"
        assert "share the rockchip-rknpu2 table" in t.description


def test_mediatek_names_its_table_and_why() -> None:
    t = target("mediatek-mdla3")
    assert t.op_table == "android-nnapi-ort"
    assert "android-nnapi-ort" in t.description and "24 rows" in t.description
    assert t.extra["partial_op_table"] in op_tables()


def test_vendor_defaults() -> None:
    assert target("cpu").backend == "onnxruntime" and target("cpu").default_activation == "uint8"
    assert (
        target("qualcomm-htp-v75").backend == "qnn"
        and target("qualcomm-htp-v75").default_activation == "uint8"
    )
    assert target("rv1106").extra["fallback"].startswith("none")
    assert target("ethos-u55").peak_tops_fp16 == 0


def test_unknown_target_is_a_key_error_with_a_suggestion() -> None:
    with pytest.raises(KeyError):
        target("rk358")
    assert did_you_mean("rk358") == "rk3588"
    assert did_you_mean("ethos-u56") == "ethos-u55"
    assert did_you_mean("zzzzzzzz") is None


def test_op_table_lookup_and_counts() -> None:
    qnn = op_table("qualcomm-qnn-htp")
    conv = qnn.lookup("Conv")
    assert conv is not None and conv.supported in SUPPORT_LEVELS
    gelu = qnn.lookup("Gelu", "com.microsoft")
    assert gelu is not None and gelu.op == "com.microsoft:Gelu"
    assert qnn.lookup("NoSuchOp") is None
    counts = qnn.counts()
    assert sum(counts.values()) == len(qnn.ops) and set(counts) == set(SUPPORT_LEVELS)
    cann = op_table("huawei-ascend-cann")
    nms = cann.lookup("BatchMultiClassNMS", "")
    assert nms is not None and nms.supported == "yes"
    with pytest.raises(KeyError):
        op_table("no-such-table")
    with pytest.raises(KeyError):
        op_table("../targets/rk3588")


def test_loading_the_catalog_imports_nothing_heavy() -> None:
    code = (
        "import sys, backends.catalog as c; c.targets(); c.op_table('rockchip-rknpu2');"
        "heavy = [m for m in ('onnx', 'onnxruntime', 'numpy', 'rich') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_target_files_are_canonical_json(gen: ModuleType) -> None:
    """Same format as gen_optables writes when it syncs op_table_version: no reformatting diffs."""
    for path in (CATALOG / "targets").glob("*.json"):
        text = path.read_text(encoding="utf-8")
        assert gen.render(json.loads(text)) == text, path.name
