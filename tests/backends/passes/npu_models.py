"""Real models and real images for the check / rewrite / preprocess tests (imported by those test modules).

Models come from the installed packages (rapidocr-onnxruntime's PP-OCRv4, the onnx package's light model
zoo) and go through the real import stage; images are scikit-image's bundled sample photos.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

import numpy as np
import onnx

from backends.passes.importer import import_model


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations
    return Path(spec.submodule_search_locations[0])


RAPIDOCR = package_dir("rapidocr_onnxruntime") / "models"
LIGHT = package_dir("onnx") / "backend" / "test" / "data" / "light"

PPOCR: dict[str, tuple[Path, list[int]]] = {
    "det": (RAPIDOCR / "ch_PP-OCRv4_det_infer.onnx", [1, 3, 64, 64]),
    "rec": (RAPIDOCR / "ch_PP-OCRv4_rec_infer.onnx", [1, 3, 48, 320]),
    "cls": (RAPIDOCR / "ch_ppocr_mobile_v2.0_cls_infer.onnx", [1, 3, 48, 192]),
}
LIGHT_MODELS = sorted(p.stem for p in LIGHT.glob("light_*.onnx"))


def _input_name(path: Path) -> str:
    model = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    return next(v.name for v in model.graph.input if v.name not in inits)


@cache
def _imported_bytes(name: str) -> bytes:
    if name in PPOCR:
        path, shape = PPOCR[name]
    else:
        path, shape = LIGHT / f"{name}.onnx", [1, 3, 224, 224]
    model, _ = import_model(path, {_input_name(path): shape}, log=lambda _: None)
    return model.SerializeToString()


def imported(name: str) -> onnx.ModelProto:
    """A fresh copy of the import stage's output for a PP-OCR model ("det", "rec", "cls") or a light model."""
    return onnx.load_from_string(_imported_bytes(name))


def write_imported(name: str, folder: Path) -> Path:
    path = folder / f"{name}.onnx"
    path.write_bytes(_imported_bytes(name))
    return path


@cache
def _photo(which: str) -> np.ndarray:
    import skimage.data

    image = getattr(skimage.data, which)()
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    return np.ascontiguousarray(image[..., :3])


def photo(which: str = "astronaut") -> np.ndarray:
    """A real RGB uint8 HWC photo from scikit-image ("astronaut", "coffee", "chelsea", "text", ...)."""
    return _photo(which).copy()


def resize_hwc(image: np.ndarray, height: int, width: int) -> np.ndarray:
    import cv2

    return cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA)


def ppocr_input(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """PP-OCR's own preprocessing: resize, BGR order, (x / 255 - 0.5) / 0.5, NCHW float32."""
    x = resize_hwc(image, height, width)[..., ::-1].astype(np.float32)
    x = (x / 255.0 - 0.5) / 0.5
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def real_tensor(shape: tuple[int, ...] | list[int], which: str = "astronaut") -> np.ndarray:
    """Real image pixels shaped to any tensor shape (for non-image tensors inside a model): the photo's
    values, scaled to about [-1, 1], tiled to the size needed."""
    values = photo(which).astype(np.float32).reshape(-1) / 127.5 - 1.0
    n = int(np.prod(shape))
    reps = -(-n // values.size)
    return np.ascontiguousarray(np.tile(values, reps)[:n].reshape(shape))
