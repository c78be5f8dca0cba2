"""The rewrite stage on real models: PP-OCRv4 rec coverage rises on Qualcomm HTP and RK3588 with outputs
within 1e-4 on real text images; exclusions, fusion switches, rollback and determinism."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from encoder_model import encoder, token_feeds
from npu_models import imported, photo, ppocr_input, write_imported

from backends.catalog import target
from backends.passes import estimate as E
from backends.passes.check import CheckPass
from backends.passes.rewrite.rules import CLEANUP, Context, Match, Rewrite, names
from backends.passes.rewrite.stage import RewritePass, rewrite_model
from backends.passes.rewrite.verify import max_diff, run_model, worst
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
@pytest.mark.parametrize("tid", ["rk3588"])  # the HTP's table already places every node of it
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
    """Replaces every HardSigmoid by `op`, as a clean-up (always applied). Sigmoid is numerically wrong,
    though the detector's saturated output map hides it on random inputs (the boundary tensors do not);
    Sqrt is NaN below zero."""

    family = "test"
    kind = CLEANUP

    def __init__(self, op: str = "Sigmoid", name: str = "broken") -> None:
        self.op, self.name = op, name

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("HardSigmoid"):
            m = Match(self.name, ctx.facts.names[i], [i])
            ctx.node(m, self.op, [ctx.nodes[i].input[0]], [ctx.nodes[i].output[0]])
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


# ---------------------------------------------------------------- a transformer encoder with a padding mask


@pytest.fixture(scope="module")
def tagger() -> onnx.ModelProto:
    return encoder()


@pytest.mark.parametrize("tid", ["rk3588", "qualcomm-htp-v75"])
def test_encoder_with_padding_mask_gets_its_rewrites(tagger: onnx.ModelProto, tid: str) -> None:
    """The all-false mask makes the float model NaN: that feed is reported and not used, the others
    verify the rewrites, coverage rises, and sentences with padding keep their logits within 1e-4."""
    tgt = target(tid)
    result = rewrite_model(tagger, tgt, E.precision_for(tgt, QUANT), {}, log=lambda _: None)
    report = result.report()
    rejected = report["verified_on"]["rejected"]
    assert [r["name"] for r in rejected] == ["random-0 (booleans all false)"]
    assert "NaN/Inf at logits" in rejected[0]["reason"]
    assert report["verified_on"]["feeds"] and not report["rolled_back"]
    rise = 0.1 if tid == "rk3588" else 0.01  # the HTP's table places all but a few nodes already
    assert result.coverage_after >= result.coverage_before + rise, (
        result.coverage_before,
        result.coverage_after,
    )
    for feed in token_feeds(4):
        (want,) = run_model(tagger, feed)
        (got,) = run_model(result.model, feed)
        assert float(np.max(np.abs(want - got))) <= 1e-4


def test_no_rewrite_lifts_the_model_past_the_targets_opset(tagger: onnx.ModelProto) -> None:
    """gelu_recompose needs opset 20: on rk3588 (rknn-toolkit2 loads <= 19) it is skipped, with the
    reason; on the HTP (no ceiling stated) it fires and the model is opset 20."""
    rk, htp = target("rk3588"), target("qualcomm-htp-v75")
    assert rk.max_opset == 19 and htp.max_opset is None
    on_rk = rewrite_model(tagger, rk, E.precision_for(rk, QUANT), {}, log=lambda _: None)
    assert max(o.version for o in on_rk.model.opset_import if o.domain in ("", "ai.onnx")) <= 19
    assert not any(n.op_type == "Gelu" for n in on_rk.model.graph.node)
    skipped = {s["name"]: s["reason"] for s in on_rk.report()["skipped"]}
    assert "opset <= 19" in skipped["gelu_recompose"]
    on_htp = rewrite_model(tagger, htp, E.precision_for(htp, QUANT), {}, log=lambda _: None)
    assert any(n.op_type == "Gelu" for n in on_htp.model.graph.node)


def test_a_rewrite_is_switched_off_by_name(tagger: onnx.ModelProto) -> None:
    htp = target("qualcomm-htp-v75")
    off = rewrite_model(
        tagger, htp, E.precision_for(htp, QUANT), {"disable": ["gelu_recompose"]}, log=lambda _: None
    )
    assert not any(n.op_type == "Gelu" for n in off.model.graph.node)
    assert {"name": "gelu_recompose", "reason": "rewrite.disable names it"} in off.report()["skipped"]
    assert "gelu_recompose" in names()


def test_a_nan_difference_is_a_failure_not_zero() -> None:
    assert math.isnan(worst(0.0, float("nan"))) and math.isnan(worst(float("nan"), 0.0))
    a = np.array([1.0, np.inf, np.nan], np.float32)
    assert max_diff(a, a.copy()) == 0.0
    assert math.isnan(max_diff(a, np.array([np.nan, np.inf, np.nan], np.float32)))
    tgt = target("rk3588")
    result = rewrite_model(
        imported("cls"),
        tgt,
        E.precision_for(tgt, QUANT),
        {},
        log=lambda _: None,
        rewrites=[_Broken("Sqrt", "nan_maker")],
    )
    report = result.report()
    assert [(r["name"], r["max_abs_diff"]) for r in report["rolled_back"]] == [("nan_maker", None)]


def test_rewrites_are_verified_on_the_specs_own_samples(tagger: onnx.ModelProto, tmp_path: Path) -> None:
    """With calibration data the stage verifies on those files (the float model's finite answers on
    real sentences), not on seeded feeds; the report names the folder and the files."""
    path = tmp_path / "tagger.onnx"
    onnx.save(tagger, str(path))
    calib = tmp_path / "calib"
    calib.mkdir()
    for k, feed in enumerate(token_feeds(3)):
        np.savez(calib / f"s{k}.npz", **feed)
    np.savez(
        calib / "a_empty.npz", input_ids=np.zeros((1, 32), np.int64), attention_mask=np.zeros((1, 32), bool)
    )
    check = CheckPass().run(
        StageRequest(
            "check",
            target("rk3588"),
            {"quantization.mode": "ptq"},
            {"model": path},
            tmp_path,
            tmp_path / "c.log",
        )
    )
    (tmp_path / "rw").mkdir()
    config = {
        "rewrite": {"replace_unsupported": True, "fusion": {}, "exclude": [], "disable": []},
        "target": "rk3588",
        "quantization.calibration.data": "calib",
    }
    out = RewritePass().run(
        StageRequest(
            "rewrite",
            target("rk3588"),
            config,
            {"model": path, "placement": check.artifacts["placement"], "calibration_data": calib},
            tmp_path / "rw",
            tmp_path / "rw.log",
        )
    )
    verified = out.report["verified_on"]
    assert verified["source"] == "quantization.calibration.data (calib)"
    assert sorted(verified["feeds"]) == ["s0.npz", "s1.npz", "s2.npz"]
    assert [r["name"] for r in verified["rejected"]] == ["a_empty.npz"]
    assert out.report["coverage"]["nodes"]["after"] > out.report["coverage"]["nodes"]["before"]


def test_a_node_the_vendor_tool_refused_is_rewritten_though_the_table_accepts_it() -> None:
    """The check stage's placement names the vendor's own verdicts (support "backend"): the HTP's
    validation placing every LayerNormalization of khmersm's encoder on the CPU (this test's verdicts,
    in the report format the QNN check writes) makes them rewrite candidates, though the op table
    puts them on the HTP."""
    from backends.passes import placement as P
    from backends.passes.importer import import_model
    from tests.backends.tasks.task_models import segmenter, segmenter_feeds

    model, _ = import_model(segmenter(), {"x": [1, 32], "mask": [1, 32]}, log=lambda _: None)
    htp = target("qualcomm-htp-v75")
    precision = E.precision_for(htp, QUANT)
    refused = {n.name for n in model.graph.node if n.op_type == "LayerNormalization"}
    assert refused, "the encoder has LayerNormalization nodes (else this test shows nothing)"
    verdicts = {n.name: ("CPU" if n.name in refused else "NPU") for n in model.graph.node}
    vendor = P.compute(model, htp, QUANT, device_map=verdicts, device_map_source="QNN validation (test)")

    by_table = rewrite_model(model, htp, precision, {}, log=lambda _: None)
    by_vendor = rewrite_model(model, htp, precision, {}, log=lambda _: None, vendor=vendor)
    assert "layernorm_decompose" not in {f.name for f in by_table.fired}
    assert "layernorm_decompose" in {f.name for f in by_vendor.fired}
    assert not any(n.op_type == "LayerNormalization" for n in by_vendor.model.graph.node)
    before = {n["name"]: n for n in by_vendor.before["nodes"]}
    assert all(before[name]["device"] == "CPU" and before[name]["support"] == "backend" for name in refused)
    for feed in segmenter_feeds(4, seed=5):
        want = run_model(model, feed)
        got = run_model(by_vendor.model, feed)
        assert max(float(np.max(np.abs(w - g))) for w, g in zip(want, got, strict=True)) <= 1e-4
