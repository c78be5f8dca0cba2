"""Every Qualcomm target states its HTP clock (the profile's milliseconds) and what it rests on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

CATALOG = Path(__file__).resolve().parents[3] / "backends" / "catalog" / "targets"
BASIS_KINDS = {"published", "derived", "nominal", "typical board", "assumed", "third-party"}


@pytest.mark.parametrize("name", ["qualcomm-htp-v73", "qualcomm-htp-v75"])
def test_every_qualcomm_target_has_an_htp_clock_with_its_basis(name: str) -> None:
    entry = json.loads((CATALOG / f"{name}.json").read_text())
    assert entry["htp_clock_mhz"] > 0
    basis = entry["basis"]["htp_clock_mhz"]
    assert basis.split(":")[0] in BASIS_KINDS and len(basis) > 40
