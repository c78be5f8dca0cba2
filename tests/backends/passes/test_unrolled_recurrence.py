"""LSTM and GRU unrolled into their steps (rules.recurrent): the same outputs as ONNX Runtime's own
recurrent kernels, in every direction and layout, on real exports and on single nodes of each form."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from backends.passes.facts import analyse
from backends.passes.rewrite.converter_forms import convertible
from backends.passes.rewrite.graph_edit import apply_matches
from backends.passes.rewrite.rules import Context
from backends.passes.rewrite.rules.recurrent import UnrolledRecurrence

RNG = np.random.default_rng(11)
STEPS, BATCH, FEATURES, HIDDEN = 7, 2, 5, 4


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in session.run(None, feeds)]


def _cell(op: str, direction: str, layout: int, initial: bool, **attrs: object) -> onnx.ModelProto:
    """One node with seeded weights (the same for either layout)."""
    rng = np.random.default_rng(5)
    gates = {"LSTM": 4, "GRU": 3}[op]
    dirs = 2 if direction == "bidirectional" else 1
    x_shape = [STEPS, BATCH, FEATURES] if layout == 0 else [BATCH, STEPS, FEATURES]
    state_shape = [dirs, BATCH, HIDDEN] if layout == 0 else [BATCH, dirs, HIDDEN]
    inits = {
        "W": rng.standard_normal((dirs, gates * HIDDEN, FEATURES)).astype(np.float32),
        "R": rng.standard_normal((dirs, gates * HIDDEN, HIDDEN)).astype(np.float32) * 0.5,
        "B": rng.standard_normal((dirs, 2 * gates * HIDDEN)).astype(np.float32),
    }
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    node_inputs = ["x", "W", "R", "B", ""]
    if initial:
        names = ["h0", "c0"] if op == "LSTM" else ["h0"]
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, state_shape) for n in names]
        node_inputs += names
    outputs = ["y", "y_h", "y_c"] if op == "LSTM" else ["y", "y_h"]
    node = helper.make_node(
        op, node_inputs, outputs, hidden_size=HIDDEN, direction=direction, layout=layout, **attrs
    )
    graph = helper.make_graph(
        [node],
        "g",
        inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def _unrolled(model: onnx.ModelProto, op: str) -> tuple[onnx.ModelProto, int]:
    facts = analyse(model)
    matches = UnrolledRecurrence(op).find(Context(model, facts, {}, None, None))
    return apply_matches(model, matches), len(matches)


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {
        v.name: RNG.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim]).astype(np.float32)
        for v in model.graph.input
    }


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_each_form_gives_onnx_runtime_s_outputs(op: str, direction: str, layout: int) -> None:
    """Against ONNX Runtime's kernels; layout 1 (batch first), which they do not take, against the
    layout-0 node of the same weights on the transposed inputs."""
    for initial in (False, True):
        model = _cell(op, direction, layout, initial)
        new, count = _unrolled(model, op)
        assert count == 1 and op not in {n.op_type for n in new.graph.node}
        feeds = _feeds(model)
        got = _run(new, feeds)
        if layout == 0:
            want = _run(model, feeds)
        else:
            swapped = {k: np.ascontiguousarray(v.swapaxes(0, 1)) for k, v in feeds.items()}
            time_major = _run(_cell(op, direction, 0, initial), swapped)
            want = [time_major[0].transpose(2, 0, 1, 3)] + [v.swapaxes(0, 1) for v in time_major[1:]]
        for w, g in zip(want, got, strict=True):
            assert w.shape == g.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _unrolled_matches_onnx_runtime(model: onnx.ModelProto, op: str) -> None:
    """One node unrolled; its outputs and ONNX Runtime's on the same seeded inputs within 1e-5."""
    new, count = _unrolled(model, op)
    assert count == 1
    feeds = _feeds(model)
    for want, got in zip(_run(model, feeds), _run(new, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_gru_with_linear_before_reset_keeps_its_candidate_bias_inside_the_reset() -> None:
    _unrolled_matches_onnx_runtime(_cell("GRU", "bidirectional", 0, True, linear_before_reset=1), "GRU")


def test_an_lstm_with_peepholes_reads_the_cell_state_in_its_gates() -> None:
    model = _cell("LSTM", "bidirectional", 0, True)
    assert list(model.graph.node[0].input)[4:] == ["", "h0", "c0"]
    model.graph.node[0].input.append("P")
    peep = np.random.default_rng(3).standard_normal((2, 3 * HIDDEN)).astype(np.float32)
    model.graph.initializer.append(numpy_helper.from_array(peep, "P"))
    _unrolled_matches_onnx_runtime(model, "LSTM")


def test_forms_the_steps_do_not_cover_stay_recurrent() -> None:
    """A clip, other activations, or a sequence_lens input: left as the node they are."""
    assert _unrolled(_cell("LSTM", "forward", 0, False, clip=1.0), "LSTM")[1] == 0
    other = _cell("GRU", "forward", 0, False, activations=["HardSigmoid", "Tanh"])
    assert _unrolled(other, "GRU")[1] == 0
    lens = _cell("GRU", "forward", 0, False)
    lens.graph.node[0].input[4] = "lens"
    lens.graph.initializer.append(numpy_helper.from_array(np.full(BATCH, STEPS, np.int32), "lens"))
    assert _unrolled(lens, "GRU")[1] == 0


def test_a_real_gru_encoder_converts_without_a_recurrent_node() -> None:
    """arabic-name-romanizer's encoder (two bidirectional GRUs of 128 over 24 ids and a padding mask):
    the converter forms leave no GRU, and the outputs match the original on real inputs."""
    from pathlib import Path

    from backends.passes.importer import import_model
    from tests.backends.tasks.task_models import romanizer_encoder

    model, _ = import_model(
        Path(romanizer_encoder()), {"src": [1, 24], "src_mask": [1, 24]}, log=lambda _m: None
    )
    out, notes = convertible(model, log=lambda _m: None)
    assert "unrolled_gru x2" in notes, notes
    assert "GRU" not in {n.op_type for n in out.graph.node}
    for length in (24, 9):
        src = np.zeros((1, 24), np.int64)
        src[0, :length] = RNG.integers(4, 150, length)
        feeds = {"src": src, "src_mask": src == 0}  # true at padding, as the package builds it
        for want, got in zip(_run(model, feeds), _run(out, feeds), strict=True):
            if want.dtype.kind == "f":
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
            else:
                np.testing.assert_array_equal(got, want)


def test_a_layer_too_large_to_copy_into_every_step_stays_recurrent(monkeypatch: pytest.MonkeyPatch) -> None:
    """ddddocr's CRNN LSTM (hidden 512, 32 steps, both directions): 256 MB of recurrent weights
    counted once a step, which took TF's converter to 14.7 GB unrolled. Left as the LSTM it is."""
    from pathlib import Path

    from backends.passes.importer import import_model
    from backends.passes.rewrite.rules import recurrent
    from tests.backends.tasks.task_models import ddddocr_model

    model, _ = import_model(
        Path(ddddocr_model("common.onnx")), {"input1": [1, 1, 64, 256]}, log=lambda _m: None
    )
    assert _unrolled(model, "LSTM")[1] == 0
    monkeypatch.setattr(recurrent, "_MAX_STEP_WEIGHT_BYTES", 300 * 1024 * 1024)
    assert _unrolled(model, "LSTM")[1] == 1  # the size alone kept it


def test_a_spec_turns_the_unrolling_off_by_name() -> None:
    """`rewrite.disable: [unrolled_gru]` reaches the converters' forms: the GRU stays as it is (a long
    sequence whose unrolled graph is too large for the converter is the user's call)."""
    from backends.passes.rewrite.converter_forms import disabled
    from backends.passes.rewrite.rules import names
    from reconciler.engine.stages import readers

    assert {"unrolled_lstm", "unrolled_gru", "clip_bounds"} <= set(names())
    skip = disabled({"rewrite.disable": ["unrolled_gru"]})
    assert skip == ("unrolled_gru",) and disabled({}) == ()
    model = _cell("GRU", "forward", 0, False)
    kept, notes = convertible(model, log=lambda _m: None, skip=skip)
    assert "GRU" in {n.op_type for n in kept.graph.node} and not notes
    # the field enters the converting stages' keys only when it names something
    assert readers("rewrite.disable", {"rewrite": {"disable": ["unrolled_gru"]}}) == [
        "rewrite",
        "quantize",
        "compile",
    ]
    assert readers("rewrite.disable", {"rewrite": {}}) == ["rewrite"]
