"""The TFLite backends end to end on real models: ethos-u (vela) and mediatek (ncc-tflite bundle).

One repository holds every spec these tests check (digits and the PP-OCR detector, each for an Ethos-U
and a MediaTek APU, digits with a layer kept float on an Ethos-U and a MediaTek APU, plus a float spec
an Ethos-U refuses) and is applied once for the run
(tests.backends.built_once): the two quantize stages of one model share one onnx2tf conversion through
the conversion cache (backends.tflite.stages.converted), as a user deploying one model to both would.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from backends.sdk import bundles, toolchains
from reconciler.state.store import Store
from tests.backends.built_once import built_once
from tests.backends.detector import write_det_repo
from tests.backends.tflite.needs import NEEDS_TFLITE
from tests.conftest import DIGITS_SPEC, copy_digits, git, run_npuctl

pytest.importorskip("ethosu.vela")
pytestmark = [
    pytest.mark.slow,
    NEEDS_TFLITE,
]

QUANT = """\
  quantization:
    mode: ptq
    calibration: {data: ../data/calib, samples: 16, method: minmax}
"""
Built = tuple[Path, dict[str, Any]]


def _lock(repo: Path, name: str) -> dict[str, Any]:
    variant: dict[str, Any] = json.loads((repo / "specs" / f"{name}.lock.json").read_text())["variants"][
        "default"
    ]
    return variant


def _build(repo: Path) -> dict[str, Any]:
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text(".npuctl/\n")
    (repo / "specs").mkdir()
    copy_digits(repo)
    ethos = DIGITS_SPEC.format(name="digits-u55").replace("target: cpu", "target: ethos-u55")
    ethos = ethos.replace("  evaluate:", QUANT + "  evaluate:")
    (repo / "specs" / "digits-u55.yaml").write_text(
        ethos.replace("latency_ms: {p90: 1000}", "latency_ms: {p90: 1000}\n    peak_memory_mb: 0.001")
    )
    mtk = DIGITS_SPEC.format(name="digits-mtk").replace("target: cpu", "target: mediatek-mdla3")
    compile_ = "  compile: {optimization_level: 2, options: {num_mdla: 1}}\n"
    (repo / "specs" / "digits-mtk.yaml").write_text(
        mtk.replace("  evaluate:", QUANT + compile_ + "  evaluate:")
    )
    (repo / "specs" / "digits-float-u85.yaml").write_text(
        DIGITS_SPEC.format(name="digits-float-u85").replace("target: cpu", "target: ethos-u85")
    )
    keep = QUANT + "    sensitive_layers: {keep: fp32, nodes: [/fc1/Gemm]}\n"
    for name, target in (("digits-u55-keep", "ethos-u55"), ("digits-mtk-keep", "mediatek-mdla3")):
        spec = DIGITS_SPEC.format(name=name).replace("target: cpu", f"target: {target}")
        (repo / "specs" / f"{name}.yaml").write_text(spec.replace("  evaluate:", keep + "  evaluate:"))
    a16 = DIGITS_SPEC.format(name="digits-mtk-a16").replace("target: cpu", "target: mediatek-mdla3")
    quant16 = QUANT + "    activations: int16\n"
    (repo / "specs" / "digits-mtk-a16.yaml").write_text(a16.replace("  evaluate:", quant16 + "  evaluate:"))
    write_det_repo(repo, "ethos-u85", name="det-u85", data="det-data")
    write_det_repo(repo, "mediatek-mdla3", name="det-mtk", data="det-data")
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "NEUROPILOT_SDK_ROOT": ""}
    result = run_npuctl(repo, "apply", "--json", env=env)
    # 1: the float Ethos-U spec fails its compile; the others build (u55's SRAM bound fails: exit 3 alone)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    return {s["name"]: s for s in json.loads(result.stdout)["specs"]}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return built_once(tmp_path_factory, "tflite-backends", _build)


def custom_ops(path: Path) -> list[str]:
    """The custom operator codes of a .tflite (read with vela's own flatbuffer schema)."""
    from ethosu.vela.tflite.Model import Model

    model = Model.GetRootAsModel(path.read_bytes(), 0)
    codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
    return [c.CustomCode().decode() for c in codes if c.CustomCode()]


def float_top1(repo: Path) -> float:
    """The float digits model's top-1 on the repository's labelled samples, computed here."""
    session = ort.InferenceSession(str(repo / "models" / "digits.onnx"))
    labels = dict(line.split() for line in (repo / "data/eval/labels.txt").read_text().splitlines())
    hits = [
        int(np.argmax(session.run(None, {"image": np.load(repo / "data/eval" / n)})[0]) == int(label))
        for n, label in labels.items()
    ]
    return sum(hits) / len(hits)


def test_ethos_u_compiles_with_vela_and_records_its_estimates(built: Built) -> None:
    repo, out = built
    verdicts = {v["name"]: v for v in out["digits-u55"]["slo"]}
    assert verdicts["latency_ms.p90"]["evidence"] == "estimated: vela"
    assert verdicts["latency_ms.p90"]["passed"] is None, "met on an estimate is never a plain pass"
    assert verdicts["peak_memory_mb"]["evidence"] == "estimated: vela"
    assert verdicts["peak_memory_mb"]["passed"] is False
    assert (
        verdicts["accuracy.min"]["evidence"] == "measured:host" and verdicts["accuracy.min"]["passed"] is True
    )
    variant = _lock(repo, "digits-u55")
    measured = variant["measurements"]
    cycles = measured["npu_cycles"]
    assert cycles["evidence"] == "estimated: vela" and cycles["value"] > 1000
    store = Store(repo / ".npuctl" / "store")
    artifacts = variant["stages"]["compile"]["artifacts"]
    record = json.loads(store.path(artifacts["vela_report"]["digest"]).read_text())
    clock = record["summary"]["core_clock"]
    assert measured["latency_ms.p90"]["value"] == pytest.approx(cycles["value"] / clock * 1000, rel=1e-3)
    assert record["placement"]["npu_operators"] > 0 and record["placement"]["source"].startswith("vela ")
    assert record["per_layer"] and all(row["target"] in ("NPU", "CPU") for row in record["per_layer"])
    # the artifact is what the Ethos-U driver loads: a .tflite holding vela's ethos-u custom operator
    assert "ethos-u" in custom_ops(store.path(artifacts["vela_model"]["digest"]))
    reference = float_top1(repo)
    assert measured["accuracy.reference"]["value"] == pytest.approx(reference)
    assert abs(measured["accuracy"]["value"] - reference) <= 0.05


def test_mediatek_writes_the_ncc_tflite_bundle_and_measures_the_tflite(built: Built) -> None:
    repo, out = built
    verdicts = {v["name"]: v for v in out["digits-mtk"]["slo"]}
    assert verdicts["accuracy.min"]["evidence"] == "measured:host" and verdicts["accuracy.min"]["passed"]
    assert verdicts["latency_ms.p90"]["passed"] is not True, "no APU time without NeuroPilot"
    assert verdicts["latency_ms.p90"]["evidence"] == "estimated"
    variant = _lock(repo, "digits-mtk")
    artifacts = variant["stages"]["compile"]["artifacts"]
    assert {"bundle", "tflite", "tflite_io"} <= set(artifacts) and "dla" not in artifacts
    store = Store(repo / ".npuctl" / "store")
    bundle = store.path(artifacts["bundle"]["digest"])
    assert bundles.names(bundle) == ["build.sh", "manifest.json", "model.tflite"]
    subprocess.run(["bash", "-n"], input=bundles.read(bundle, "build.sh").decode(), text=True, check=True)
    (command,) = json.loads(bundles.read(bundle, "manifest.json"))["commands"]
    assert command[0].endswith("/ncc-tflite") and "--arch=mdla3.0" in command and "--opt=2" in command
    assert "--num-mdla=1" in command and command[-3:] == ["model.tflite", "-o", "out/model.dla"]
    assert "--relax-fp32" not in command, "an int8 model needs no fp32 relaxation"
    tflite = bundles.read(bundle, "model.tflite")
    assert tflite[4:8] == b"TFL3" and tflite == store.path(artifacts["tflite"]["digest"]).read_bytes()
    io = json.loads(store.path(artifacts["tflite_io"]["digest"]).read_text())
    assert io["variant"] == "full_int8" and io["io"]["inputs"][0]["dtype"] == "int8"
    reference = float_top1(repo)
    assert abs(variant["measurements"]["accuracy"]["value"] - reference) <= 0.05
    # the Ethos-U spec's conversion was reused: the same int8 TFLite bytes under both specs
    ethos_tar = store.path(_lock(repo, "digits-u55")["stages"]["quantize"]["artifacts"]["model"]["digest"])
    assert bundles.read(ethos_tar, "model.tflite") == tflite


def test_a_float_spec_on_an_ethos_u_is_refused_with_the_reason(built: Built) -> None:
    _, out = built
    stages = {s["name"]: s for s in out["digits-float-u85"]["stages"]}
    assert stages["compile"]["action"] == "failed"
    assert "ethos-u85 takes full_int8 or int16_act" in stages["compile"]["reason"]
    assert all(v["passed"] is not True for v in out["digits-float-u85"]["slo"])


def test_a_real_detector_on_ethos_u85_and_mediatek(built: Built) -> None:
    repo, _ = built
    ethos, mtk = _lock(repo, "det-u85"), _lock(repo, "det-mtk")
    measured = ethos["measurements"]
    assert (
        measured["npu_cycles"]["evidence"] == "estimated: vela" and measured["npu_cycles"]["value"] > 10_000
    )
    for variant in (ethos, mtk):
        accuracy = variant["measurements"]["accuracy"]
        assert accuracy["evidence"] == "measured:host" and accuracy["value"] >= 0.3, accuracy
    store = Store(repo / ".npuctl" / "store")
    assert "ethos-u" in custom_ops(
        store.path(ethos["stages"]["compile"]["artifacts"]["vela_model"]["digest"])
    )
    assert "bundle" in mtk["stages"]["compile"]["artifacts"]


def test_vela_per_layer_cycles_become_the_profile(built: Built) -> None:
    """vela's per-layer CSV as the Ethos-U evaluate's profile: per operator the cycles turned into time
    at the core clock, where vela placed it, its MACs, all named as vela's estimate."""
    repo, _ = built
    stages = _lock(repo, "digits-u55")["stages"]
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


def stage_report(repo: Path, variant: dict[str, Any], stage: str) -> dict[str, Any]:
    """The stage's recorded report (state.db), by the key the lock names."""
    import sqlite3

    key = variant["stages"][stage]["key"]
    with sqlite3.connect(repo / ".npuctl" / "state.db") as db:
        (text,) = db.execute("SELECT report FROM records WHERE key = ?", (key,)).fetchone()
    report: dict[str, Any] = json.loads(text)
    return report


TFLITE_TYPES = {0: "float32", 2: "int32", 7: "int16", 9: "int8"}


def operators(tflite: bytes) -> list[dict[str, Any]]:
    """Per operator of the first subgraph: builtin name, output type, and its weight tensor's shape and
    type (the second input, when constant), read with vela's own flatbuffer schema."""
    from ethosu.vela.tflite.BuiltinOperator import BuiltinOperator
    from ethosu.vela.tflite.Model import Model

    names = {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}
    model = Model.GetRootAsModel(tflite, 0)
    graph = model.Subgraphs(0)
    out = []
    for i in range(graph.OperatorsLength()):
        op = graph.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex())
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        output = graph.Tensors(op.Outputs(0))
        row: dict[str, Any] = {
            "op": names.get(builtin, str(builtin)),
            "name": output.Name().decode(),
            "out": TFLITE_TYPES.get(output.Type(), "other"),
        }
        if op.InputsLength() > 1 and op.Inputs(1) >= 0:
            weight = graph.Tensors(op.Inputs(1))
            if model.Buffers(weight.Buffer()).DataLength():
                row["weight_shape"] = sorted(int(d) for d in weight.ShapeAsNumpy())
                row["weight"] = TFLITE_TYPES.get(weight.Type(), "other")
        out.append(row)
    return out


def test_a_layer_kept_float_is_float_in_the_tflite_runs_on_litert_and_is_vela_cpu(built: Built) -> None:
    """keep: fp32 on /fc1/Gemm through onnx2tf + LiteRT's selective quantization: that layer's TFLite
    op (found here by its weight's shape, from the ONNX initializer) has float32 weights and output, every
    other compute op int8; LiteRT runs the model; vela leaves the float ops to the Cortex-M CPU and the
    estimate says they are not in it."""
    repo, out = built
    assert out["digits-u55-keep"]["errors"] == []
    variant = _lock(repo, "digits-u55-keep")
    store = Store(repo / ".npuctl" / "store")
    bundle = store.path(variant["stages"]["quantize"]["artifacts"]["model"]["digest"])
    ops = operators(bundles.read(bundle, "model.tflite"))
    model = onnx.load(str(repo / "models" / "digits.onnx"))
    inits = {t.name: sorted(t.dims) for t in model.graph.initializer}
    fc1 = next(n for n in model.graph.node if n.name == "/fc1/Gemm")
    kept_shape = inits[fc1.input[1]]
    compute = [o for o in ops if o["op"] in ("CONV_2D", "FULLY_CONNECTED", "DEPTHWISE_CONV_2D")]
    kept = [o for o in compute if o.get("weight_shape") == kept_shape]
    assert len(kept) == 1 and kept[0]["weight"] == "float32" and kept[0]["out"] == "float32", ops
    others = [o for o in compute if o is not kept[0]]
    assert len(others) == 3 and all(o["weight"] == "int8" and o["out"] == "int8" for o in others), ops
    assert {"QUANTIZE", "DEQUANTIZE"} <= {o["op"] for o in ops}, "float island between int8 ops"
    report = stage_report(repo, variant, "quantize")
    (entry,) = report["kept"]
    assert entry["node"] == "/fc1/Gemm" and entry["precision"] == "fp32"
    assert entry["tflite_op"] == "FULLY_CONNECTED" and entry["fused_with"] == ["/relu3/Relu"]
    # LiteRT ran it: the accuracy is a host measurement close to the float model's, computed here
    measured = variant["measurements"]
    reference = float_top1(repo)
    assert measured["accuracy"]["evidence"] == "measured:host"
    assert abs(measured["accuracy"]["value"] - reference) <= 0.05
    # vela: the float ops are its CPU operators, and the estimate says what it leaves out
    record = json.loads(
        store.path(variant["stages"]["compile"]["artifacts"]["vela_report"]["digest"]).read_text()
    )
    placement = record["placement"]
    assert placement["kept_float"] == ["/fc1/Gemm"]
    on_cpu = {op["name"].split(" (outputs")[0] for op in placement["cpu"]}
    assert kept[0]["name"] in on_cpu, (kept, placement["cpu"])
    float_ops = [o["name"] for o in ops if o["out"] == "float32" or o["op"] == "QUANTIZE"]
    assert set(float_ops) <= on_cpu and placement["cpu_operators"] == len(float_ops) == 3, (float_ops, on_cpu)
    detail = measured["latency_ms.p90"]["detail"]
    assert "are not in this estimate" in detail and "/fc1/Gemm" in detail
    assert "/fc1/Gemm" in measured["npu_coverage"]["detail"]
    # MediaTek: the same kept layer; its bundle relaxes the float ops to fp16
    mtk = _lock(repo, "digits-mtk-keep")
    bundle = store.path(mtk["stages"]["compile"]["artifacts"]["bundle"]["digest"])
    (command,) = json.loads(bundles.read(bundle, "manifest.json"))["commands"]
    assert "--relax-fp32" in command


def test_the_quantize_check_scores_a_few_samples_with_the_specs_measure(built: Built) -> None:
    """The written variants are checked against the ONNX model on the first 16 calibration samples (not
    one): the float32 conversion is exact-ish, the int8 model within the broken-model bound; only the
    variant the spec asks for is written."""
    repo, _ = built
    for name in ("digits-u55", "det-u85"):
        variant = _lock(repo, name)
        report = stage_report(repo, variant, "quantize")
        checks = report["checks"]
        assert set(checks) == {"float32", report["variant"]}, "only the variant asked for is written"
        calib = len(
            list((repo / ("data/calib" if name.startswith("digits") else "det-data/calib")).glob("*"))
        )
        for check in checks.values():
            assert check["samples"] == min(16, calib, report["calibration"]["samples"]), check
        assert checks["float32"]["cosine"] >= 0.999 or checks["float32"]["max_abs_diff"] < 1e-3
        quantized = checks[report["variant"]]
        assert quantized["drop"] == pytest.approx(quantized["float"] - quantized["quantized"], abs=1e-5)
        assert quantized["drop"] <= quantized["budget"] == 0.5 and quantized["passed"] is True


PROBE = """\
import json, sys
import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType

def rows(**kind):
    interpreter = Interpreter(model_path=sys.argv[1], **kind)
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    found = []
    for path in sys.argv[2:]:
        x = np.load(path).transpose(0, 2, 3, 1)  # the TFLite takes channels last
        scale, zero = inp["quantization"]
        interpreter.set_tensor(inp["index"], np.clip(np.round(x / scale + zero), -128, 127).astype(np.int8))
        interpreter.invoke()
        scale, zero = out["quantization"]
        y = interpreter.get_tensor(out["index"]).astype(np.float64)
        found.append(((y - zero) * scale).ravel().tolist())
    return found

reference = rows(experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
print(json.dumps({"reference": reference, "xnnpack": rows()}))
"""


def test_the_int8_check_is_the_worst_cosine_over_sixteen_calibration_samples(
    built: Built, tmp_path: Path
) -> None:
    """The quantize check's int8 figure recomputed here: the recorded TFLite run on LiteRT's reference
    kernels (in the tflite venv; not the XNNPACK delegate LiteRT applies by default, which rounds this
    model's int8 differently) over the 16 calibration samples the spec selects (the 16 smallest sha256
    of "0:<name>"), each sample's output cosine against ONNX Runtime's float output, the worst of them."""
    import hashlib

    repo, _ = built
    variant = _lock(repo, "digits-u55")
    check = stage_report(repo, variant, "quantize")["checks"]["full_int8"]
    files = sorted((repo / "data" / "calib").glob("*.npy"))
    chosen = sorted(files, key=lambda p: hashlib.sha256(f"0:{p.name}".encode()).hexdigest())[:16]
    chosen = sorted(chosen, key=lambda p: p.name)
    store = Store(repo / ".npuctl" / "store")
    bundle = store.path(variant["stages"]["quantize"]["artifacts"]["model"]["digest"])
    (tmp_path / "model.tflite").write_bytes(bundles.read(bundle, "model.tflite"))
    (tmp_path / "probe.py").write_text(PROBE)
    python = str(toolchains.python(toolchains.TFLITE))
    done = subprocess.run(
        [python, "-I", str(tmp_path / "probe.py"), str(tmp_path / "model.tflite"), *map(str, chosen)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    session = ort.InferenceSession(str(repo / "models" / "digits.onnx"))
    worst = {}
    for kernels, rows in got.items():
        cosines = []
        for path, row in zip(chosen, rows, strict=True):
            want = session.run(None, {"image": np.load(path)})[0].ravel().astype(np.float64)
            have = np.asarray(row)
            cosines.append(float(have @ want / (np.linalg.norm(have) * np.linalg.norm(want))))
        worst[kernels] = min(cosines)
    assert check["samples"] == 16
    # recorded to 6 decimals; the two kernel libraries differ in the 6th here, so this tells them apart
    assert round(worst["reference"], 6) != round(worst["xnnpack"], 6), worst
    assert check["cosine"] == round(worst["reference"], 6), (check, worst)
    assert check["cosine"] < 1.0, "int8 changes the outputs: a check that cannot differ would say 1"


def test_sixteen_bit_activations_are_a_16x8_tflite_that_litert_runs(built: Built) -> None:
    """activations: int16 on the MediaTek APU: TF's 16x8 mode (int16 in, out and between the ops, int8
    weights), measured on LiteRT close to the float model."""
    repo, out = built
    assert out["digits-mtk-a16"]["errors"] == []
    variant = _lock(repo, "digits-mtk-a16")
    store = Store(repo / ".npuctl" / "store")
    bundle = store.path(variant["stages"]["quantize"]["artifacts"]["model"]["digest"])
    ops = operators(bundles.read(bundle, "model.tflite"))
    compute = [o for o in ops if o["op"] in ("CONV_2D", "FULLY_CONNECTED")]
    assert len(compute) == 4 and all(o["out"] == "int16" and o["weight"] == "int8" for o in compute), ops
    io = json.loads(store.path(variant["stages"]["compile"]["artifacts"]["tflite_io"]["digest"]).read_text())
    assert io["variant"] == "int16_act"
    assert {t["dtype"] for t in io["io"]["inputs"] + io["io"]["outputs"]} == {"int16"}
    measured = variant["measurements"]["accuracy"]
    assert measured["evidence"] == "measured:host" and abs(measured["value"] - float_top1(repo)) <= 0.05


def _vela_here(tflite: Path, out: Path) -> tuple[dict[str, int], dict[str, str]]:
    """vela run here on the compile stage's int8 TFLite with the catalog's settings for ethos-u55:
    its operator counts (stdout) and its summary CSV row."""
    import sys

    import ethosu

    from backends.catalog import targets

    extra = targets()["ethos-u55"].extra
    ini = Path(ethosu.__path__[0]) / "config_files" / "Arm" / "vela.ini"
    args = [sys.executable, "-m", "ethosu.vela", str(tflite), "--output-dir", str(out), "--config", str(ini)]
    args += [
        "--accelerator-config",
        extra["vela_accelerator"],
        "--system-config",
        extra["vela_system_config"],
    ]
    args += ["--memory-mode", extra["vela_memory_mode"], "--optimise", "Performance", "--show-cpu-operations"]
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    counts = {k: int(n) for k, n in re.findall(r"^(CPU|NPU) operators = (\d+)", done.stdout, re.M)}
    (summary,) = out.glob("*_summary_*.csv")
    with summary.open(newline="") as fh:
        return counts, next(csv.DictReader(fh))


def test_ethos_u_coverage_latency_and_memory_equal_velas_own_summary(built: Built, tmp_path: Path) -> None:
    """Every figure after compile is vela's, operator counts included: the compile stage records them
    (so they stand before evaluate), and the lock's equal what vela prints when run here."""
    repo, _ = built
    variant = _lock(repo, "digits-u55")
    store = Store(repo / ".npuctl" / "store")
    tflite = store.path(variant["stages"]["compile"]["artifacts"]["tflite"]["digest"])
    counts, summary = _vela_here(tflite, tmp_path)
    measured = variant["measurements"]
    total = counts["NPU"] + counts["CPU"]
    assert measured["npu_coverage"]["value"] == round(counts["NPU"] / total, 6)
    assert f"{counts['NPU']}/{total} TFLite operators" in measured["npu_coverage"]["detail"]
    assert measured["npu_coverage"]["evidence"] == "estimated: vela"
    ms = float(summary["inference_time"]) * 1000
    for name in ("latency_ms.estimate", "latency_ms.p90"):
        assert (
            measured[name]["value"] == pytest.approx(ms, rel=1e-6)
            and measured[name]["evidence"] == "estimated: vela"
        )
    kb = float(summary["sram_memory_used"])
    assert measured["peak_memory_mb"]["value"] == pytest.approx(kb * 1024 / 1e6, rel=1e-6)
    if counts["CPU"] == 0:
        assert measured["fallback_partitions"]["value"] == 0
    assert measured["fallback_partitions"]["evidence"] == "estimated: vela"


def test_artifacts_and_export_name_velas_file_as_the_one_an_app_opens(built: Built, tmp_path: Path) -> None:
    repo, _ = built
    shown = run_npuctl(repo, "artifacts", "specs/digits-u55.yaml", "--json")
    rows = json.loads(shown.stdout)["artifacts"]
    assert [r["file"] for r in rows if r["entry"]] == ["model_vela.tflite"]
    exported = run_npuctl(repo, "export", "specs/digits-u55.yaml", str(tmp_path / "out"))
    assert exported.returncode == 0, exported.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [v["artifact"]["file"] for v in manifest["variants"]] == ["model_vela.tflite"]


def _builtin_ops(path: Path) -> list[str]:
    """The builtin operator names of a .tflite in execution order (vela's own flatbuffer schema)."""
    from ethosu.vela.tflite.BuiltinOperator import BuiltinOperator
    from ethosu.vela.tflite.Model import Model

    names = {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}
    model = Model.GetRootAsModel(path.read_bytes(), 0)
    codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
    graph = model.Subgraphs(0)
    ops = [codes[graph.Operators(i).OpcodeIndex()] for i in range(graph.OperatorsLength())]
    return [names[max(c.BuiltinCode(), c.DeprecatedBuiltinCode())] for c in ops]


def _mdla_table() -> dict[str, str]:
    """TFLite operator -> support, read here from the rows of the catalog's MDLA 3.0 table (each row
    names the TFLite operators it was mapped from)."""
    from backends.catalog import op_table, targets

    table = op_table(targets()["mediatek-mdla3"].extra["partial_op_table"])
    rows = [(r.supported, r.constraints) for r in table.ops.values()]
    rows += [(r["supported"], r["constraints"]) for r in table.unmapped]
    out: dict[str, str] = {}
    for supported, constraints in rows:
        found = re.search(r"mapped via TFLite ([A-Z0-9_ /]+);", constraints)
        for name in found.group(1).split("/") if found else ():
            out[name.strip()] = supported
    return out


@pytest.mark.parametrize("name", ["digits-mtk", "det-mtk"])
def test_mediatek_coverage_counts_the_tflite_operators_ncc_tflite_is_given(built: Built, name: str) -> None:
    """After compile, MediaTek's coverage is over the operators of the TFLite that reaches ncc-tflite
    (read back here with vela's flatbuffer schema), each placed by MediaTek's MDLA table, never the
    NNAPI op table's count over the ONNX graph; the lock takes compile's figure, and explain lists the
    nodes where the op table placed otherwise, with the tool as the winner."""
    repo, _ = built
    variant = _lock(repo, name)
    store = Store(repo / ".npuctl" / "store")
    compiled = variant["stages"]["compile"]
    ops = _builtin_ops(store.path(compiled["artifacts"]["tflite"]["digest"]))
    table = _mdla_table()
    on = sum(1 for op in ops if table.get(op) in ("yes", "partial"))
    coverage = variant["measurements"]["npu_coverage"]
    assert coverage["evidence"] == "estimated: MDLA 3.0 guide on the TFLite"
    assert coverage["value"] == round(on / len(ops), 6)
    assert f"{on}/{len(ops)} of the TFLite's operators" in coverage["detail"]
    assert coverage["record"] == compiled["key"]
    placement = json.loads(store.path(compiled["artifacts"]["tool_placement"]["digest"]).read_text())
    explained = run_npuctl(repo, "explain", f"specs/{name}.yaml", "compile", "--json")
    assert explained.returncode == 0, explained.stderr
    (stage,) = json.loads(explained.stdout)["stages"]
    assert stage["disagreements"] == placement["disagreements"]
    assert all(d["won"] == "MDLA 3.0 guide on the TFLite" for d in stage["disagreements"])
    assert {n["name"] for n in placement["nodes"]}, "mapped back to the ONNX model's nodes"
