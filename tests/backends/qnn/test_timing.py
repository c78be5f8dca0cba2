"""HTP simulator cycles at the catalog's HTP clock: an estimate, named as one, computed here by hand."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from backends.catalog import targets
from backends.qnn.timing import latency_estimate

CATALOG = Path(__file__).resolve().parents[3] / "backends" / "catalog" / "targets"
BASIS_KINDS = {"published", "derived", "nominal", "typical board", "assumed", "third-party"}


@pytest.mark.parametrize("name", ["qualcomm-htp-v73", "qualcomm-htp-v75"])
def test_every_qualcomm_target_has_an_htp_clock_with_its_basis(name: str) -> None:
    entry = json.loads((CATALOG / f"{name}.json").read_text())
    assert entry["htp_clock_mhz"] > 0
    basis = entry["basis"]["htp_clock_mhz"]
    assert basis.split(":")[0] in BASIS_KINDS and len(basis) > 40


def test_cycles_become_milliseconds_at_the_clock_and_stay_an_estimate() -> None:
    target = targets()["qualcomm-htp-v75"]
    clocked = replace(target, extra={**target.extra, "htp_clock_mhz": 1250})
    found = latency_estimate(3_468_871, clocked, "QNN HTP simulator")
    expected_ms = 3_468_871 / 1_250_000_000 * 1000  # cycles / (cycles per second) in ms
    assert set(found) == {"latency_ms.p50", "latency_ms.p90", "latency_ms.p95", "latency_ms.p99"}
    for value in found.values():
        assert value["value"] == pytest.approx(expected_ms, rel=1e-6)
        assert value["evidence"].startswith("estimated") and "measured" not in value["evidence"]
        assert "1250 MHz" in value["detail"] and "not a time measured on a device" in value["detail"]
        assert target.extra["basis"]["htp_clock_mhz"] in value["detail"], "the clock's basis travels with it"
        assumed = target.extra["basis"]["htp_clock_mhz"].startswith("assumed")
        assert ("assumed" in value) == assumed, "an assumed clock marks the figure as an assumption"


def test_no_clock_no_latency() -> None:
    target = targets()["qualcomm-htp-v75"]
    bare = replace(target, extra={k: v for k, v in target.extra.items() if k != "htp_clock_mhz"})
    assert latency_estimate(1000, bare, "sim") == {}
    assert latency_estimate(0, target, "sim") == {}
