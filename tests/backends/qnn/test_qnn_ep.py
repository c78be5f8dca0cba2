"""The qnn backend on onnxruntime-qnn: QNN's own validation, EPContext compile, the HTP simulator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from backends.catalog import targets
from backends.qnn.stages import QnnCheck, QnnCompile, context_files
from backends.qnn.validation import device_map, parse
from backends.sdk.base import StageRequest
from backends.sdk.errors import TerminalError
from reconciler.state.store import Store
from tests.backends.built_once import built_once
from tests.backends.detector import SIZE
from tests.conftest import DIGITS_SPEC, copy_digits, git, qdq_digits, run_npuctl

pytest.importorskip("onnxruntime_qnn")
ROOT = Path(__file__).resolve().parents[3]

LOG = """\
2026-12-01 22:16:34.596398345 [V:onnxruntime:, qnn_execution_provider.cc:1713 LogNodeSupport] \
Validation PASSED for 1 nodes in OrtNodeUnit (Sin) :
\tOperator type: Sin Node name: sin Node index: 1

2026-12-01 22:16:34.596403492 [V:onnxruntime:, qnn_execution_provider.cc:1713 LogNodeSupport] \
Validation FAILED for 1 nodes in OrtNodeUnit (Erf) :
\tOperator type: Erf Node name: erf Node index: 2
\tREASON : Operators of type `Erf` are not supported by QNN EP.

2026-12-01 22:16:34.734658599 [V:onnxruntime:, session_state.cc:1598 VerifyEachNodeIsAssignedToAnEp] Node placements
2026-12-01 22:16:34.734669289 [V:onnxruntime:, session_state.cc:1604 VerifyEachNodeIsAssignedToAnEp]  \
Node(s) placed on [QNNExecutionProvider]. Number of nodes: 1
2026-12-01 22:16:34.734673693 [V:onnxruntime:, session_state.cc:1606 VerifyEachNodeIsAssignedToAnEp]   \
QNNExecutionProvider_1 (QNNExecutionProvider_QNNExecutionProvider_1_0)
2026-12-01 22:16:34.734677364 [V:onnxruntime:, session_state.cc:1604 VerifyEachNodeIsAssignedToAnEp]  \
Node(s) placed on [CPUExecutionProvider]. Number of nodes: 2
2026-12-01 22:16:34.734679709 [V:onnxruntime:, session_state.cc:1606 VerifyEachNodeIsAssignedToAnEp]   Erf (erf)
2026-12-01 22:16:34.734679709 [V:onnxruntime:, session_state.cc:1606 VerifyEachNodeIsAssignedToAnEp]   Sin (sin)
"""


def test_the_validation_log_gives_qnns_verdict_and_ort_placement() -> None:
    found = parse(LOG)
    assert found.verdicts["sin"].passed and not found.verdicts["erf"].passed
    assert "`Erf` are not supported" in found.verdicts["erf"].reason
    assert found.cpu == {"erf", "sin"}
    assert device_map(["sin", "erf", "other"], found) == {"sin": "CPU", "erf": "CPU", "other": "CPU"}


def _odd_model(path: Path) -> Path:
    """Relu -> Sin -> Erf -> Relu: QNN's HTP rejects Erf (the shared op table cannot know that)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Sin", ["a"], ["b"], name="sin"),
        helper.make_node("Erf", ["b"], ["c"], name="erf"),
        helper.make_node("Relu", ["c"], ["y"], name="relu2"),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)]
    )
    onnx.save(model, str(path))
    return path


def test_check_places_nodes_by_qnns_own_validation(tmp_path: Path) -> None:
    model = _odd_model(tmp_path / "odd.onnx")
    work = tmp_path / "work"
    work.mkdir()
    target = targets()["qualcomm-htp-v75"]
    config = {"target": target.id, "quantization.mode": "none", "compile": {"options": {}}}
    out = QnnCheck().run(StageRequest("check", target, config, {"model": model}, work, work / "log.txt"))
    assert out.report["source"].startswith("onnxruntime-qnn ") and "HTP validation" in out.report["source"]
    assert "soc_model 57" in out.report["source"] and "htp_arch v75" in out.report["source"]
    placement = json.loads(out.artifacts["placement"].read_text())
    devices = {n["name"]: n["device"] for n in placement["nodes"]}
    assert devices == {"relu": "NPU", "sin": "NPU", "erf": "CPU", "relu2": "NPU"}
    erf = next(n for n in placement["nodes"] if n["name"] == "erf")
    assert erf["failed"] and erf["failed"][0].startswith("QNN: ") and "Erf" in erf["failed"][0]
    assert out.report["qnn_validation"]["failed"].keys() == {"erf"}
    assert out.report["qnn_validation"]["placed_on_cpu"] is None  # placed after finalizing: not read


QUANT = """\
  quantization:
    mode: ptq
    calibration: {data: ../data/calib, samples: 16, method: minmax}
"""


Built = tuple[Path, dict[str, Any]]


def _build(repo: Path) -> dict[str, Any]:
    """digits on the v75 HTP and the PP-OCR detector on the v73, applied together."""
    from tests.backends.detector import write_det_repo

    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text(".npuctl/\n")
    (repo / "specs").mkdir()
    copy_digits(repo)
    text = DIGITS_SPEC.format(name="digits").replace("target: cpu", "target: qualcomm-htp-v75")
    (repo / "specs" / "digits.yaml").write_text(text.replace("  evaluate:", QUANT + "  evaluate:"))
    write_det_repo(repo, "qualcomm-htp-v73", data="det-data")
    result = run_npuctl(repo, "apply", "--json")
    assert result.returncode in (0, 3), result.stdout[-3000:] + result.stderr[-3000:]
    return {s["name"]: s for s in json.loads(result.stdout)["specs"]}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return built_once(tmp_path_factory, "qnn-ep", _build)


@pytest.mark.slow
def test_apply_builds_an_epcontext_binary_and_measures_it_on_the_htp_simulator(built: Built) -> None:
    digits_repo, specs = built
    out = specs["digits"]
    assert all(s["action"] == "built" for s in out["stages"]), out["stages"]
    verdicts = {v["name"]: v for v in out["slo"]}
    assert verdicts["accuracy.min"]["evidence"] == "measured:host simulator"
    assert verdicts["accuracy.min"]["passed"] is True
    assert verdicts["latency_ms.p90"]["passed"] is not True, "no latency is ever measured on a simulator"
    lock = json.loads((digits_repo / "specs" / "digits.lock.json").read_text())
    variant = lock["variants"]["default"]
    artifacts = variant["stages"]["compile"]["artifacts"]
    assert {"context_model", "context_binary", "bundle"} <= set(artifacts)
    cycles = variant["measurements"]["htp_cycles"]
    assert cycles["evidence"] == "estimated: QNN HTP simulator cycles" and cycles["value"] > 0
    assert "not device time" in cycles["detail"]
    # the emulated cycles follow host time: no latency SLO is judged on them, the roofline's estimate is
    assert not [name for name in variant["measurements"] if name.startswith("latency_ms.p")]
    estimate = variant["measurements"]["latency_ms.estimate"]
    assert estimate["evidence"] == "estimated" and estimate["detail"].startswith("roofline")
    assert verdicts["latency_ms.p90"]["evidence"] == "estimated"
    assert "no latency SLO is judged" in cycles["detail"]
    # the simulator's per-op cycles, mapped onto the deployed (QDQ) model, are evaluate's profile
    profile_record = variant["stages"]["evaluate"]["artifacts"]["profile"]
    profile = json.loads(Store(digits_repo / ".npuctl" / "store").path(profile_record["digest"]).read_text())
    assert profile["evidence"] == "estimated: QNN HTP simulator cycles"
    assert sum(layer["cycles"] for layer in profile["layers"]) == profile["total_cycles"] <= cycles["value"]
    assert "/conv1/Conv" in {name for layer in profile["layers"] for name in layer["onnx_nodes"]}
    conv = next(layer for layer in profile["layers"] if "/conv1/Conv" in layer["onnx_nodes"])
    assert conv["precision"] == "uint8", "the QDQ quantizer's default activation type on the HTP"
    # the artifact is what ONNX Runtime's QNN EP loads: an EPContext node naming the binary beside it
    store = Store(digits_repo / ".npuctl" / "store")
    ctx = store.path(artifacts["context_model"]["digest"])
    binary = store.path(artifacts["context_binary"]["digest"])
    assert "EPContext" in {n.op_type for n in onnx.load(str(ctx)).graph.node}
    assert context_files(ctx) == [artifacts["context_binary"]["file"]]
    assert binary.stat().st_size == artifacts["context_binary"]["size"] > 10_000
    # simulator accuracy against the float model's, computed here from the labels
    import onnxruntime as ort

    session = ort.InferenceSession(str(digits_repo / "models" / "digits.onnx"))
    labels = dict(line.split() for line in (digits_repo / "data/eval/labels.txt").read_text().splitlines())
    hits = [
        int(
            np.argmax(session.run(None, {"image": np.load(digits_repo / "data/eval" / name)})[0])
            == int(label)
        )
        for name, label in labels.items()
    ]
    float_top1 = sum(hits) / len(hits)
    measured = variant["measurements"]
    assert measured["accuracy.reference"]["value"] == pytest.approx(float_top1)
    assert abs(measured["accuracy"]["value"] - float_top1) <= 0.05, measured["accuracy"]


@pytest.mark.slow
def test_the_compile_check_is_the_shared_one_and_catches_a_context_from_another_model(
    built: Built, tmp_path: Path
) -> None:
    """The HTP simulator's outputs of the compiled context are held to the tolerance every compile
    check uses (backends.sdk.artifact_check); a context that is not its source's fails with one line."""
    import shutil

    from backends.qnn.stages import check_context, soc

    digits_repo, _ = built
    variant = json.loads((digits_repo / "specs" / "digits.lock.json").read_text())["variants"]["default"]
    store = Store(digits_repo / ".npuctl" / "store")
    compiled = variant["stages"]["compile"]["artifacts"]
    job = tmp_path / "job"
    job.mkdir()
    shutil.copyfile(store.path(compiled["context_model"]["digest"]), job / "model_ctx.onnx")
    shutil.copyfile(
        store.path(compiled["context_binary"]["digest"]), job / compiled["context_binary"]["file"]
    )
    source = store.path(variant["stages"]["quantize"]["artifacts"]["model"]["digest"])
    target = targets()["qualcomm-htp-v75"]
    config: dict[str, Any] = {"compile": {"options": {}}}
    request = StageRequest(
        "compile",
        target,
        config,
        {"eval_data": digits_repo / "data" / "eval"},
        tmp_path,
        tmp_path / "log.txt",
    )
    record = check_context(job, source, soc(target, config), request)
    assert record["agrees"] and record["tolerance"] == 0.25 and record["bulk_channel_error"] < 0.25
    assert record["data"] == "the first 1 samples of evaluate.data"
    other = onnx.load(str(source))
    # the same graph with every bias moved (its int32 values, not their zero points): another model
    biases = {n.input[0] for n in other.graph.node if n.op_type == "DequantizeLinear"}
    for tensor in other.graph.initializer:
        if tensor.name in biases and tensor.data_type == TensorProto.INT32 and len(tensor.dims) == 1:
            values = onnx.numpy_helper.to_array(tensor) + 4000
            tensor.CopyFrom(onnx.numpy_helper.from_array(values.astype(np.int32), tensor.name))
    onnx.save(other, str(tmp_path / "other.onnx"))
    with pytest.raises(TerminalError, match="disagrees with the model it was compiled from"):
        check_context(job, tmp_path / "other.onnx", soc(target, config), request)


@pytest.mark.slow
def test_a_real_detector_compiles_for_the_htp_and_agrees_with_float_on_the_simulator(built: Built) -> None:
    git_repo, _ = built
    lock = json.loads((git_repo / "specs" / "det.lock.json").read_text())
    variant = lock["variants"]["default"]
    compiled = variant["stages"]["compile"]
    assert {"context_model", "context_binary", "bundle"} <= set(compiled["artifacts"])
    assert compiled["artifacts"]["context_binary"]["size"] > 100_000
    placement = variant["stages"]["check"]
    measured = variant["measurements"]
    # coverage is QNN's own partitioning of the compiled model (what the EPContext model holds), read
    # here from the context model in the store: nodes left outside the context run on the CPU
    import onnx

    store = Store(git_repo / ".npuctl" / "store")
    ctx = onnx.load(
        str(store.path(compiled["artifacts"]["context_model"]["digest"])), load_external_data=False
    )
    outside = [n for n in ctx.graph.node if n.op_type != "EPContext"]
    coverage = measured["npu_coverage"]
    assert coverage["evidence"] == "estimated: onnxruntime-qnn", placement
    assert "EPContext partitioning" in coverage["detail"]
    assert (coverage["value"] == 1.0) == (not outside), (coverage, [n.op_type for n in outside])
    assert measured["accuracy"]["evidence"] == "measured:host simulator"
    assert measured["accuracy"]["value"] >= 0.5, measured["accuracy"]
    # the simulator's cycles follow the work: the detector (hundreds of times digits' MACs, counted
    # here from the two graphs) takes many times the cycles of digits on the same simulator
    digits = json.loads((git_repo / "specs" / "digits.lock.json").read_text())["variants"]["default"]
    det_macs = conv_gemm_macs(git_repo / "models" / "det.onnx", [1, 3, SIZE, SIZE])
    work = det_macs / conv_gemm_macs(git_repo / "models" / "digits.onnx", [1, 1, 8, 8])
    assert work > 100, work
    assert measured["htp_cycles"]["value"] > 5 * digits["measurements"]["htp_cycles"]["value"]


def conv_gemm_macs(path: Path, shape: list[int]) -> int:
    """Multiply-accumulates of the Conv and Gemm/MatMul nodes with the (single) input at `shape`."""
    import onnx
    from onnx import shape_inference

    model = onnx.load(str(path))
    inits = {t.name for t in model.graph.initializer}
    (value,) = [v for v in model.graph.input if v.name not in inits]
    for dim, size in zip(value.type.tensor_type.shape.dim, shape, strict=True):
        dim.Clear()
        dim.dim_value = size
    model = shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.value_info}
    shapes.update({v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.output})
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    for node in model.graph.node:  # weights held in Constant nodes (paddle2onnx writes them so)
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            weights[node.output[0]] = list(node.attribute[0].t.dims)
    total = 0
    for node in model.graph.node:
        if node.op_type == "Conv" and node.input[1] in weights and node.output[0] in shapes:
            out = shapes[node.output[0]]
            kernel = weights[node.input[1]]  # [out_ch, in_ch/group, kh, kw]
            total += int(np.prod(out)) * int(np.prod(kernel[1:]))
        elif node.op_type in ("Gemm", "MatMul") and node.input[1] in weights:
            total += int(np.prod(weights[node.input[1]]))
    return total


def test_qnns_qdq_config_reaches_the_quantizer_under_the_specs_own_settings(tmp_path: Path) -> None:
    from backends.passes.quant.policy import resolve
    from backends.passes.quant.qdq_build import _merge_backend_options
    from backends.qnn.stages import qnn_options

    model = _odd_model(tmp_path / "odd.onnx")
    target = targets()["qualcomm-htp-v75"]
    policy = resolve({"quantization": {"mode": "ptq", "activations": "uint16"}}, target)
    options = qnn_options(model, policy)
    assert options["MinimumRealRange"] > 0 and options["DedicatedQDQPair"] is False
    extra = {"WeightSymmetric": False, "TensorQuantOverrides": {"b": [{"quant_type": "spec"}]}}
    given = {
        "WeightSymmetric": True,
        "TensorQuantOverrides": {"b": [{"quant_type": "qnn"}], "c": [{"scale": 1.0}], "gone": [{}]},
    }
    _merge_backend_options(extra, given, model)
    assert extra["WeightSymmetric"] is False, "the spec's setting wins"
    assert extra["TensorQuantOverrides"] == {"b": [{"quant_type": "spec"}], "c": [{"scale": 1.0}]}


def test_qnn_preprocess_fuses_gelu_and_keeps_the_records_of_earlier_stages(tmp_path: Path) -> None:
    from backends.qnn.stages import qnn_preprocess
    from backends.sdk import metadata

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    consts = [
        helper.make_tensor("sqrt2", TensorProto.FLOAT, [], [1.4142135]),
        helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
        helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
    ]
    nodes = [
        helper.make_node("Div", ["x", "sqrt2"], ["d"], name="div"),
        helper.make_node("Erf", ["d"], ["e"], name="erf"),
        helper.make_node("Add", ["e", "one"], ["a"], name="add"),
        helper.make_node("Mul", ["x", "a"], ["m"], name="mul"),
        helper.make_node("Mul", ["m", "half"], ["y"], name="mul2"),
    ]
    graph = helper.make_graph(nodes, "gelu", [x], [y], initializer=consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    metadata.put(model, "npuctl.preprocess", {"input": "x"})
    onnx.save(model, str(tmp_path / "gelu.onnx"))
    assert qnn_preprocess(tmp_path / "gelu.onnx", tmp_path / "out.onnx") is True
    fused = onnx.load(str(tmp_path / "out.onnx"))
    assert "Erf" not in {n.op_type for n in fused.graph.node} and "Gelu" in {
        n.op_type for n in fused.graph.node
    }
    assert metadata.get(fused, "npuctl.preprocess") == {"input": "x"}
    import onnxruntime as ort

    feed = {"x": np.linspace(-3, 3, 8, dtype=np.float32)[None]}
    want = ort.InferenceSession(str(tmp_path / "gelu.onnx")).run(None, feed)[0]
    got = ort.InferenceSession(str(tmp_path / "out.onnx")).run(None, feed)[0]
    assert np.allclose(got, want, atol=1e-5)


def _erf_only(path: Path) -> Path:
    """One Erf node: QNN's HTP refuses it, so nothing is left to compile."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])
    graph = helper.make_graph([helper.make_node("Erf", ["x"], ["y"], name="lone_erf")], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_a_graph_split_around_a_refused_node_builds_with_the_cpu_between(tmp_path: Path) -> None:
    """Erf between two supported regions: two HTP partitions in one context binary, Erf on the CPU."""
    model = _odd_model(tmp_path / "odd.onnx")
    work = tmp_path / "work"
    work.mkdir()
    target = targets()["qualcomm-htp-v75"]
    config = {"target": target.id, "quantization.mode": "none", "compile": {"options": {}}}
    request = StageRequest("compile", target, config, {"model": model}, work, work / "log.txt")
    out = QnnCompile().run(request)
    assert out.report["epcontext"]["partitions"] == 2
    assert "2 HTP partitions with the CPU between them" in out.note
    ctx = onnx.load(str(out.artifacts["context_model"]))
    assert [n.op_type for n in ctx.graph.node if n.op_type != "EPContext"] == ["Erf"]


def test_a_failed_compile_names_the_node_qnn_refused(tmp_path: Path) -> None:
    model = _erf_only(tmp_path / "odd.onnx")
    erf = next(n.name for n in onnx.load(str(model)).graph.node if n.op_type == "Erf")
    work = tmp_path / "work"
    work.mkdir()
    target = targets()["qualcomm-htp-v75"]
    config = {"target": target.id, "quantization.mode": "none", "compile": {"options": {}}}
    request = StageRequest("compile", target, config, {"model": model}, work, work / "log.txt")
    with pytest.raises(TerminalError) as caught:
        QnnCompile().run(request)
    message = str(caught.value)
    assert "\n" not in message
    assert f"QNN refused Erf node '{erf}'" in message and "`Erf` are not supported" in message
    assert "'sin'" not in message and "'relu'" not in message


@pytest.mark.slow
def test_a_model_that_arrives_with_its_own_q_dq_is_compiled_from_its_scales(digits_repo: Path) -> None:
    """The digits model quantized by ONNX Runtime's static quantizer, `mode: qat`: the quantize stage
    passes the model through (every compute op quantized, its own types), the HTP context is compiled
    from those Q/DQ nodes, and the simulator's accuracy is measured against the source model."""
    qdq = qdq_digits(digits_repo)
    text = DIGITS_SPEC.format(name="digits").replace("target: cpu", "target: qualcomm-htp-v75")
    text = text.replace("digits.onnx", "qdq.onnx").replace(
        "  evaluate:", "  quantization: {mode: qat}\n  evaluate:"
    )
    (digits_repo / "specs" / "digits.yaml").write_text(text)
    done = run_npuctl(digits_repo, "apply", "--json")
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]
    out = json.loads(done.stdout)["specs"][0]
    assert {s["name"]: s["action"] for s in out["stages"]}["compile"] == "built", out["stages"]
    verdicts = {v["name"]: v for v in out["slo"]}
    assert (
        verdicts["accuracy.min"]["evidence"] == "measured:host simulator"
        and verdicts["accuracy.min"]["passed"]
    )
    import sqlite3

    with sqlite3.connect(digits_repo / ".npuctl" / "state.db") as db:
        reports = {s: json.loads(r) for s, r in db.execute("select stage, report from records")}
    quantize = reports["quantize"]
    assert quantize["mode"] == "qat" and quantize["float_compute_ops"] == [], quantize
    source = {n.op_type for n in onnx.load(str(qdq)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= source
    check = reports["compile"]["epcontext"]["check"]  # the HTP simulator against the Q/DQ source
    assert check["agrees"] and check["how"].startswith("HTP simulator vs ONNX Runtime CPU"), check
