"""The checked-in op tables: normalized ONNX names, valid levels, and versions that track their content."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import ModuleType

import pytest

CATALOG = Path(__file__).resolve().parents[3] / "backends" / "catalog"

TABLES = sorted((CATALOG / "optables").glob("*.json"))
VENDOR_KEY = re.compile(r"^(com\.microsoft|vendor):[A-Za-z][A-Za-z0-9_]*$")
VERSION = re.compile(r"^\S+( \([^)]+\))? sha256:[0-9a-f]{12}$")


def onnx_ops() -> frozenset[str]:
    import onnx.defs

    return frozenset(s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain in ("", "ai.onnx"))


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_every_published_table_is_present() -> None:
    names = {p.stem for p in TABLES}
    assert {
        "cpu",
        "qualcomm-qnn-htp",
        "android-nnapi-ort",
        "apple-coreml-ort",
        "rockchip-rknpu2",
        "arm-ethos-u55-u65",
        "arm-ethos-u85",
        "intel-npu-openvino",
        "huawei-ascend-cann",
        "mediatek-mdla3-partial",
    } <= names


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.stem)
def test_op_names_are_onnx_op_types_or_vendor_keys(path: Path) -> None:
    table = load(path)
    known = onnx_ops()
    assert table["id"] == path.stem
    unknown = sorted(op for op in table["ops"] if op not in known)
    assert unknown == [], f"not ONNX default-domain op types: {unknown}"
    bad_vendor = sorted(op for op in table["vendor_ops"] if not VENDOR_KEY.match(op))
    assert bad_vendor == []
    for row in [*table["ops"].values(), *table["vendor_ops"].values()]:
        assert row["supported"] in ("yes", "partial", "no", "unknown")
        assert isinstance(row["constraints"], str)


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.stem)
def test_files_are_canonical_json(path: Path, gen: ModuleType) -> None:
    """Sorted keys, one-space indent, trailing newline: regenerating never reorders a diff."""
    text = path.read_text(encoding="utf-8")
    assert gen.render(json.loads(text)) == text


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.stem)
def test_version_names_release_and_content_hash(path: Path, gen: ModuleType) -> None:
    table = load(path)
    assert VERSION.match(table["version"]), table["version"]
    body = {k: v for k, v in table.items() if k not in ("id", "version", "source")}
    digest = gen.content_hash({"id": table["id"], "source": table["source"], **body})
    assert table["version"].endswith(f"sha256:{digest}"), "content changed without a new version"


def test_vendor_tables_name_a_dated_release() -> None:
    for path in TABLES:
        if path.stem == "cpu":
            continue
        version = load(path)["version"]
        assert re.search(r"\((\d{4}-\d{2}(-\d{2})?|undated)\)", version), version


def test_mediatek_odd_rows_are_normalized() -> None:
    table = load(CATALOG / "optables" / "mediatek-mdla3-partial.json")
    assert not any(ch in op for op in table["ops"] for ch in " /()")
    assert {"Gemm", "MatMul", "LpPool", "ReduceMean", "GlobalAveragePool", "Pad"} <= set(table["ops"])
    assert "only with a constant B" in table["ops"]["MatMul"]["constraints"]
    assert "Pad (reflect)" in table["ops"]["Pad"]["constraints"]
    assert table["ops"]["Pad"]["supported"] == "partial"
    unmapped = {u["row"] for u in table["unmapped"]}
    assert unmapped == {"BatchToSpace(n/a ONNX; DepthToSpace-like)", "Concat of Unsqueeze (TFLite PACK)"}


def test_contrib_ops_are_vendor_keys() -> None:
    qnn = load(CATALOG / "optables" / "qualcomm-qnn-htp.json")
    assert "com.microsoft:Gelu" in qnn["vendor_ops"] and "Gelu" in qnn["ops"]
    assert "com.microsoft:Inverse" in qnn["vendor_ops"] and "Inverse" not in qnn["ops"]


def test_cpu_table_covers_the_default_domain() -> None:
    import onnx.defs

    cpu = load(CATALOG / "optables" / "cpu.json")
    latest = {s.name for s in onnx.defs.get_all_schemas() if s.domain in ("", "ai.onnx")}
    # ops of a newer onnx than the one the table was generated with may be missing; none may be invented
    assert set(cpu["ops"]) <= onnx_ops()
    assert len(set(cpu["ops"]) & latest) > 0.9 * len(latest)
    for op in ("Conv", "Gemm", "Relu", "MaxPool", "QuantizeLinear", "DequantizeLinear", "Constant"):
        assert cpu["ops"][op]["supported"] == "yes", op
    assert "onnxruntime-" in cpu["version"] and cpu["version"].startswith("onnx-")
