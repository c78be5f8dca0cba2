"""vela's per-layer CSV as the Ethos-U evaluate's profile: per operator the cycles turned into time at
the core clock, where vela placed it, its MACs, all named as vela's estimate."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from backends import toolchains
from reconciler.state.store import Store
from tests.conftest import DIGITS_SPEC, copy_digits, git, run_npuctl

pytest.importorskip("ethosu.vela")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        toolchains.python(toolchains.TFLITE) is None,
        reason="needs `npuctl toolchain install tflite` (.ci/setup)",
    ),
]

QUANT = (
    "  quantization:\n    mode: ptq\n    calibration: {data: ../data/calib, samples: 16, method: minmax}\n"
)


def test_vela_per_layer_cycles_become_the_profile(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "specs").mkdir()
    copy_digits(repo)
    spec = DIGITS_SPEC.format(name="u55").replace("target: cpu", "target: ethos-u55")
    (repo / "specs" / "u55.yaml").write_text(spec.replace("  evaluate:", QUANT + "  evaluate:"))
    done = run_npuctl(repo, "apply", "specs/u55.yaml", env={"PATH": "/usr/local/bin:/usr/bin:/bin"})
    assert done.returncode in (0, 3), done.stdout[-2000:] + done.stderr[-2000:]
    stages = json.loads((repo / "specs" / "u55.lock.json").read_text())["variants"]["default"]["stages"]
    store = Store(repo / ".npuctl" / "store")
    profile = json.loads(store.path(stages["evaluate"]["artifacts"]["profile"]["digest"]).read_text())
    vela = json.loads(store.path(stages["compile"]["artifacts"]["vela_report"]["digest"]).read_text())
    with store.path(stages["compile"]["artifacts"]["vela_per_layer"]["digest"]).open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    clock = float(vela["summary"]["core_clock"])
    assert profile["evidence"] == "estimated: vela" and "nothing ran" in profile["how"]
    assert len(profile["layers"]) == len(rows)
    total = sum(float(r["Op Cycles"]) for r in rows) / clock * 1e3
    assert sum(float(x["time_ms"]) for x in profile["layers"]) == pytest.approx(total, rel=1e-3)
    assert {x["device"] for x in profile["layers"]} <= {"NPU", "CPU"}
    assert sum(x["macs"] for x in profile["layers"]) == sum(int(float(r["MAC Count"])) for r in rows)
