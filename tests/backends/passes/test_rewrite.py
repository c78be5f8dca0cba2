"""The rewrite stage on real models: PP-OCRv4 rec coverage rises on Qualcomm HTP and RK3588 with outputs
within 1e-4 on real text images; exclusions, fusion switches, rollback and determinism."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from npu_models import imported, photo, ppocr_input, write_imported

from backends.catalog import target
from backends.passes import estimate as E
from backends.passes.check import CheckPass
from backends.passes.rewrite.rules import CLEANUP, Context, Match, Rewrite
from backends.passes.rewrite.stage import RewritePass, rewrite_model
from backends.passes.rewrite.verify import run_model
from backends.sdk.base import StageRequest
from backends.sdk.errors import TerminalError

QUANT = {"mode": "ptq", "weights": "int8"}


def _rewrite(name: str, tid: str, config: dict[str, object] | None = None, **kw: object):  # type: ignore[no-untyped-def]
    tgt = target(tid)
    return rewrite_model(
        imported(name), tgt, E.precision_for(tgt, QUANT), config or {}, log=lambda _: None, **kw
    )


def _real_inputs() -> list[np.ndarray]:
    """Real text: scikit-image's text sample and a crop of a photo, as PP-OCR rec feeds them."""
    text = photo("text")
    return [
        ppocr_input(text, 48, 320),
        ppocr_input(text[40:120, 0:400], 48, 320),
        ppocr_input(photo("coffee"), 48, 320),
    ]


@pytest.mark.slow  # 4-11 s each on a shared 2-core machine
@pytest.mark.parametrize("tid", ["qualcomm-htp-v75", "rk3588"])
def test_rec_coverage_rises_and_outputs_match_on_real_text(tid: str) -> None:
    result = _rewrite("rec", tid)
    before, after = result.coverage_before, result.coverage_after
    report = result.report()
    fired = ", ".join(f"{r['name']} x{r['count']}" for r in report["rewrites"])
    print(
        f"\nPP-OCRv4 rec on {tid}: NPU coverage {before:.1%} -> {after:.1%} "
        f"(CPU nodes {report['coverage']['cpu_nodes']['before']} -> {report['coverage']['cpu_nodes']['after']}; "
        f"estimate {report['estimate_ms']['before']} -> {report['estimate_ms']['after']} ms); fired: {fired}"
    )
    assert after > before
    assert not report["rolled_back"]
    original = imported("rec")
    name = original.graph.input[0].name
    for x in _real_inputs():
        (want,) = run_model(original, {name: x})
        (got,) = run_model(result.model, {name: x})
        assert float(np.max(np.abs(want - got))) <= 1e-4
        assert (want.argmax(-1) == got.argmax(-1)).all()


def test_exclude_keeps_matched_nodes_and_unknown_patterns_fail() -> None:
    full = _rewrite("cls", "rk3588")
    hs = next(r for r in full.report()["rewrites"] if r["name"] == "hardswish_recompose")
    keep = hs["nodes"][0]
    partial = _rewrite("cls", "rk3588", {"exclude": [keep]})
    hs2 = next(r for r in partial.report()["rewrites"] if r["name"] == "hardswish_recompose")
    assert hs2["count"] == hs["count"] - 1 and keep not in hs2["nodes"]
    with pytest.raises(TerminalError, match="matches no node"):
        _rewrite("cls", "rk3588", {"exclude": ["no/such/node*"]})


def test_fusion_switch_off_leaves_batchnorm() -> None:
    on = _rewrite("cls", "qualcomm-htp-v75")
    off = _rewrite("cls", "qualcomm-htp-v75", {"fusion": {"conv_bn": False}})
    count = lambda m: sum(1 for n in m.graph.node if n.op_type == "BatchNormalization")  # noqa: E731
    assert count(on.model) == 0 and count(off.model) > 0
    assert any(s["name"] == "conv_bn_fold" for s in off.report()["skipped"])


class _Broken(Rewrite):
    """Replaces every HardSigmoid by Sigmoid, as a clean-up (always applied): numerically wrong, though
    the detector's saturated output map hides it on random inputs; the boundary tensors do not."""

    name = "broken"
    family = "test"
    kind = CLEANUP

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("HardSigmoid"):
            m = Match(self.name, ctx.facts.names[i], [i])
            ctx.node(m, "Sigmoid", [ctx.nodes[i].input[0]], [ctx.nodes[i].output[0]])
            out.append(m)
        return out


def test_failed_verification_rolls_back() -> None:
    tgt = target("rk3588")
    result = rewrite_model(
        imported("det"), tgt, E.precision_for(tgt, QUANT), {}, log=lambda _: None, rewrites=[_Broken()]
    )
    report = result.report()
    assert [r["name"] for r in report["rolled_back"]] == ["broken"]
    assert not report["rewrites"]
    assert sum(1 for n in result.model.graph.node if n.op_type == "HardSigmoid") == 10


def test_rewrite_stage_is_deterministic(tmp_path: Path) -> None:
    model = write_imported("cls", tmp_path)
    outputs = []
    for run in ("a", "b"):
        folder = tmp_path / run
        (folder / "check").mkdir(parents=True)
        (folder / "rewrite").mkdir()
        check = CheckPass().run(
            StageRequest(
                "check",
                target("rk3588"),
                {"quantization.mode": "ptq"},
                {"model": model},
                folder / "check",
                folder / "check.log",
            )
        )
        config = {"rewrite": {"replace_unsupported": True, "fusion": {}, "exclude": []}, "target": "rk3588"}
        out = RewritePass().run(
            StageRequest(
                "rewrite",
                target("rk3588"),
                config,
                {"model": model, "placement": check.artifacts["placement"]},
                folder / "rewrite",
                folder / "rewrite.log",
            )
        )
        outputs.append((out.artifacts["model"].read_bytes(), out.artifacts["placement"].read_bytes()))
        report = out.report
        assert report["coverage"]["nodes"]["after"] > report["coverage"]["nodes"]["before"]
        assert report["measurements"]["npu_coverage"]["evidence"] == "estimated"
        placement = json.loads(out.artifacts["placement"].read_text())
        assert placement["coverage"]["nodes"]["fraction"] == report["coverage"]["nodes"]["after"]
        onnx.checker.check_model(onnx.load(str(out.artifacts["model"])), full_check=True)
    assert outputs[0] == outputs[1]
