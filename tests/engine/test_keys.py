from __future__ import annotations

from reconciler.engine import keys
from reconciler.engine.stages import BY_NAME, ORDER, readers


def test_canonical_json_ignores_key_order() -> None:
    assert keys.digest({"a": 1, "b": [1, 2]}) == keys.digest({"b": [1, 2], "a": 1})
    assert keys.digest({"a": 1}) != keys.digest({"a": 1.5})


def test_diff_reports_leaves() -> None:
    old = {"fields": {"quantization": {"mode": "none", "per_channel": True}}}
    new = {"fields": {"quantization": {"mode": "ptq", "per_channel": True}}}
    assert keys.diff(old, new) == [("fields.quantization.mode", "none", "ptq")]


def test_no_stage_reads_slo_or_metadata() -> None:
    assert readers("slo") == []
    assert readers("slo.latency_ms.p90") == []
    assert readers("metadata.labels") == []


def test_readers_of_nested_fields() -> None:
    assert readers("quantization.calibration.samples") == ["quantize"]
    assert set(readers("quantization.mode")) == {"check", "quantize", "compile"}
    assert readers("evaluate.runs") == ["evaluate"]
    assert set(readers("target")) == {"check", "rewrite", "quantize", "compile", "evaluate"}


def test_chain_order_and_uses_point_backwards() -> None:
    assert ORDER == ("import", "check", "rewrite", "preprocess", "quantize", "compile", "evaluate")
    for index, name in enumerate(ORDER):
        for upstream, _ in BY_NAME[name].uses.values():
            assert ORDER.index(upstream) < index


def test_quantize_reads_the_evaluation_set_only_for_the_auto_search() -> None:
    """One data set for one number: the auto search measures on evaluate.data with evaluate.task, so
    the data enters quantize's key only when the search runs (no needless rebuilds otherwise). The task
    always does: the stage's own check reads the quantized model's outputs the way the task says."""
    plain = {"quantization": {"mode": "ptq", "sensitive_layers": {"op_types": ["Gemm"]}}}
    auto = {"quantization": {"mode": "ptq", "sensitive_layers": {"auto": {"max_accuracy_drop": 0.01}}}}
    for field in ("evaluate.data", "evaluate.labels", "evaluate.metric"):
        assert "quantize" not in readers(field, plain), field
        assert {"quantize", "evaluate"} <= set(readers(field, auto)), field
    for field in ("evaluate.task", "evaluate.task.charset"):
        assert {"quantize", "evaluate"} <= set(readers(field, plain)), field
        assert {"quantize", "evaluate"} <= set(readers(field, auto)), field
    assert "quantize" not in readers("evaluate.runs", auto)
    # compile checks its artifact against its source on the first evaluation samples
    assert "compile" in readers("evaluate.data", plain) and "compile" not in readers("evaluate.labels", plain)
