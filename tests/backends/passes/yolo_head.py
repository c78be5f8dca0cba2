"""A YOLOv8-style detector at 320x320 the quantize tests share: ddddocr's real YOLOX (from its wheel)
with its grid decode built in ONNX and one output [1, N, 4+C] that concatenates decoded box
coordinates (0-320) with class scores (0-1), and real photos with text as calibration / evaluation."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import onnx

from tests.backends.detector import text_images
from tests.backends.tasks.task_models import ddddocr_model, yolov8_head

SIZE = 320


def yolox_at(folder: Path, size: int = SIZE) -> Path:
    """ddddocr's YOLOX with its input fixed to size x size (the graph is fully convolutional)."""
    model = onnx.load(str(ddddocr_model("common_det.onnx")))
    for dim in model.graph.input[0].type.tensor_type.shape.dim[2:]:
        dim.dim_value = size
    del model.graph.value_info[:]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"yolox{size}.onnx"
    _static_outputs(model, path)
    return path


def _static_outputs(model: onnx.ModelProto, path: Path) -> None:
    """Output shapes as one run gives them (the task reads the head's row count from the graph)."""
    import onnxruntime as ort

    for out in model.graph.output:
        out.type.tensor_type.ClearField("shape")
    onnx.save(model, str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {
        i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32)
        for i in session.get_inputs()
    }
    for out, value in zip(model.graph.output, session.run(None, feed), strict=True):
        for d in np.asarray(value).shape:
            out.type.tensor_type.shape.dim.add().dim_value = int(d)
    onnx.save(model, str(path))


def yolov8_at(folder: Path, size: int = SIZE) -> Path:
    return yolov8_head(yolox_at(folder, size), folder / f"v8-{size}.onnx")


def photo_samples(folder: Path, count: int, calibration: bool, size: int = SIZE) -> Path:
    """`count` photos with text (calibration and evaluation photos disjoint), BGR 0..255 as ddddocr feeds."""
    from PIL import Image

    module = text_images()
    calib, evaluation = module.photos()
    photos = calib if calibration else evaluation
    rng = random.Random(1 if calibration else 2)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        frame = module.make_image(photos[i % len(photos)], rng, 640)
        x = np.asarray(Image.fromarray(frame).resize((size, size), Image.Resampling.BILINEAR), np.float32)
        np.save(folder / f"{i:04d}.npy", x.transpose(2, 0, 1)[np.newaxis])
    return folder
