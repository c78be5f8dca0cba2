"""Realistic text-on-photo images for PP-OCR det, and the text-map / text-box fidelity metrics.

Real photos (scikit-image's and scikit-learn's bundled sample photos, no download) cropped, scaled
and flipped to 640x640, with 3-8 lines of text drawn in a real TrueType font (DejaVu; fonts-dejavu-core)
in a colour contrasting with the background, sometimes on a label box. Calibration and evaluation
use DISJOINT photos, so nothing evaluated was seen during calibration.

Metrics follow DBNet's post-processing as rapidocr runs it: the probability map binarized at 0.3; text
boxes are the connected components of the binarized map (dilated 2x2), dropping boxes under 3 px or
with a mean score under 0.5; boxes match at IoU >= 0.5.
"""

from __future__ import annotations

import glob
import importlib.util
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

SIZE = 640
FONT_GLOBS = ("/usr/share/fonts/truetype/dejavu/DejaVu*.ttf", "/usr/share/fonts/**/DejaVu*.ttf")
WORDS = (
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dog",
    "invoice",
    "total",
    "price",
    "2024",
    "ORDER",
    "No.",
    "18.50",
    "EUR",
    "hello",
    "world",
    "street",
    "exit",
    "open",
    "closed",
    "sale",
    "50%",
    "coffee",
    "tea",
    "menu",
    "station",
    "platform",
    "3",
    "gate",
    "B12",
    "warning",
    "danger",
    "keep",
    "out",
    "parking",
)

_SKIMAGE_CALIB = ("astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg", "motorcycle_left.png")
_SKIMAGE_EVAL = ("hubble_deep_field.jpg", "grass.png", "brick.png", "retina.jpg", "ihc.png")


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def photos() -> tuple[list[Path], list[Path]]:
    """(calibration photos, evaluation photos): disjoint sets of real photos shipped by packages."""
    sklearn = _package_dir("sklearn")
    if sklearn is None:
        raise RuntimeError("scikit-learn is needed for its sample photos")
    images = sklearn / "datasets" / "images"
    calib, evals = [images / "china.jpg"], [images / "flower.jpg"]
    skimage = _package_dir("skimage")
    if skimage is not None and (skimage / "data" / _SKIMAGE_CALIB[0]).is_file():
        calib += [skimage / "data" / n for n in _SKIMAGE_CALIB]
        evals += [skimage / "data" / n for n in _SKIMAGE_EVAL]
    return calib, evals


def fonts() -> list[str]:
    found: list[str] = []
    for pattern in FONT_GLOBS:
        found += glob.glob(pattern, recursive=True)
    return sorted(set(found))


def _font(rng: random.Random, size: int) -> Any:
    from PIL import ImageFont

    available = fonts()
    if available:
        return ImageFont.truetype(rng.choice(available), size)
    return ImageFont.load_default(size=size)  # Pillow's bundled scalable font when no TTF is installed


def make_image(photo: Path, rng: random.Random, size: int = SIZE) -> np.ndarray:
    """One HxWx3 uint8 BGR frame (PP-OCR's channel order)."""
    from PIL import Image, ImageDraw

    img = Image.open(photo).convert("RGB")
    w, h = img.size
    scale = rng.uniform(0.5, 1.0)
    cw, ch = int(w * scale), int(h * scale)
    x0, y0 = rng.randint(0, w - cw), rng.randint(0, h - ch)
    img = img.crop((x0, y0, x0 + cw, y0 + ch)).resize((size, size), Image.Resampling.BILINEAR)
    if rng.random() < 0.5:
        img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    draw = ImageDraw.Draw(img)
    pixels = np.asarray(img)
    for _ in range(rng.randint(3, 9)):
        font = _font(rng, rng.randint(16, 56))
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
        left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
        tw, th = int(right - left), int(bottom - top)
        if tw >= size - 10:
            continue
        x, y = rng.randint(0, size - tw - 1), rng.randint(0, size - th - 1)
        patch = pixels[y : y + th + 1, x : x + tw + 1]
        light = float(patch.mean()) > 128 if patch.size else True
        colour = tuple(rng.randint(0, 60) if light else rng.randint(195, 255) for _ in range(3))
        if rng.random() < 0.25:
            draw.rectangle((x - 4, y - 4, x + tw + 4, y + th + 4), fill=tuple(255 - c for c in colour))
        draw.text((x - left, y - top), text, font=font, fill=colour)
    return np.asarray(img)[:, :, ::-1].copy()


def generate(photo_set: Sequence[Path], count: int, seed: int, size: int = SIZE) -> list[np.ndarray]:
    rng = random.Random(seed)
    return [make_image(photo_set[i % len(photo_set)], rng, size) for i in range(count)]


def to_input(bgr: np.ndarray) -> np.ndarray:
    """PP-OCR det's input: (pixel / 255 - 0.5) / 0.5, NCHW float32 with a batch of 1."""
    x = (bgr.astype(np.float32) / 255.0 - 0.5) / 0.5
    return np.ascontiguousarray(x.transpose(2, 0, 1)[np.newaxis])


def write_npy(folder: Path, frames: Sequence[np.ndarray]) -> None:
    """Samples as float16 .npy (half the bytes; data.py widens them to float32 losslessly)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, frame in enumerate(frames):
        np.save(folder / f"{i:04d}.npy", to_input(frame).astype(np.float16))


# ---------------------------------------------------------------------------------------------- metrics


def text_boxes(prob: np.ndarray, threshold: float = 0.3, box_threshold: float = 0.5) -> list[tuple[int, ...]]:
    import cv2

    prob = prob.reshape(prob.shape[-2:])
    mask = cv2.dilate((prob > threshold).astype(np.uint8), np.ones((2, 2), np.uint8))
    count, labels, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
    boxes: list[tuple[int, ...]] = []
    for i in range(1, count):
        x, y, w, h, _area = (int(v) for v in stats[i])
        if min(w, h) < 3:
            continue
        if float(prob[y : y + h, x : x + w][labels[y : y + h, x : x + w] == i].mean()) < box_threshold:
            continue
        boxes.append((x, y, w, h))
    return boxes


def box_iou(a: Sequence[int], b: Sequence[int]) -> float:
    ix = max(0, min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0]))
    iy = max(0, min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = a[2] * a[3] + b[2] * b[3] - inter
    return inter / union if union else 0.0


def matches(reference: Sequence[Sequence[int]], found: Sequence[Sequence[int]], iou: float = 0.5) -> int:
    used: set[int] = set()
    hits = 0
    for r in reference:
        best, best_j = 0.0, -1
        for j, f in enumerate(found):
            if j not in used and (v := box_iou(r, f)) > best:
                best, best_j = v, j
        if best >= iou:
            used.add(best_j)
            hits += 1
    return hits


def compare_maps(
    reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray], threshold: float = 0.3
) -> dict[str, float]:
    """Text-map IoU and text-box F1 of `outputs` against `reference` (one probability map per image)."""
    inter = union = tp = n_ref = n_out = 0
    for r, o in zip(reference, outputs, strict=True):
        rb, ob = r > threshold, o > threshold
        inter += int((rb & ob).sum())
        union += int((rb | ob).sum())
        ref_boxes, out_boxes = text_boxes(r, threshold), text_boxes(o, threshold)
        tp += matches(ref_boxes, out_boxes)
        n_ref += len(ref_boxes)
        n_out += len(out_boxes)
    precision = tp / n_out if n_out else 1.0
    recall = tp / n_ref if n_ref else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"map_iou": inter / union if union else 1.0, "box_f1": f1, "boxes_ref": n_ref, "boxes_out": n_out}
