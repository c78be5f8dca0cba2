#!/usr/bin/env python3
"""Render the synthetic text-line images the PP-OCR example specs calibrate and evaluate on.

The PP-OCR models ship inside the `rapidocr_onnxruntime` package (the specs reference them with
`model.package`); their test images do not, and calibrating an 8-bit recognizer on random noise would
teach nothing. So this script renders short printed text lines (serial numbers, dates, prices, words)
with Pillow's built-in font onto light, unevenly lit backgrounds: the kind of crop a text detector
hands to the recognizer. Seeded, so a rerun with the same Pillow writes the same files.

    python examples/ppocr/make_images.py      # rewrites images/rec/{calib,eval} here

Images are 8-bit RGB PNGs of 48x320 (the recognizer's input height and the width the specs fix).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SEED = 7
HEIGHT, WIDTH = 48, 320
CALIB, EVAL = 64, 32
_WORDS = (
    "TOTAL INVOICE SERIAL BATCH EXPIRY DATE PRICE QTY ORDER LOT MODEL PART STORE CASH CARD CHANGE RECEIPT "
    "TABLE GATE FLIGHT SEAT TRAIN PLATFORM ROOM LEVEL EXIT NORTH SOUTH EAST WEST OPEN CLOSED"
)
WORDS = tuple(_WORDS.split())


def text_line(rng: np.random.Generator) -> str:
    """One short line: a word followed by a number, a date or a price."""
    word = WORDS[rng.integers(len(WORDS))]
    kind = rng.integers(3)
    if kind == 0:
        return f"{word} {rng.integers(10, 99999)}"
    if kind == 1:
        return f"{word} 20{rng.integers(10, 30)}-{rng.integers(1, 13):02d}-{rng.integers(1, 29):02d}"
    return f"{word} {rng.integers(1, 999)}.{rng.integers(0, 100):02d}"


def render(text: str, rng: np.random.Generator) -> np.ndarray:
    """A 48x320 uint8 RGB array: dark text from near the left edge on a light, unevenly lit background.

    No pixel noise: it would make every PNG incompressible (the example must stay small)."""
    from PIL import Image, ImageDraw, ImageFont

    background = int(rng.integers(200, 256))
    ink = int(rng.integers(0, 70))
    image = Image.new("RGB", (WIDTH, HEIGHT), (background,) * 3)
    font = ImageFont.load_default(size=int(rng.integers(24, 32)))
    draw = ImageDraw.Draw(image)
    left, top, _, bottom = draw.textbbox((0, 0), text, font=font)
    x = int(rng.integers(2, 12)) - left  # a detector's crop: text starts near the left edge
    y = (HEIGHT - (bottom - top)) // 2 - top + int(rng.integers(-3, 4))
    draw.text((x, y), text, fill=(ink,) * 3, font=font)
    pixels = np.asarray(image, dtype=np.int16)
    shading = np.linspace(0, int(rng.integers(-40, 41)), WIDTH).round().astype(np.int16)
    return np.clip(pixels + shading[None, :, None], 0, 255).astype(np.uint8)


def write_set(folder: Path, count: int, rng: np.random.Generator) -> list[str]:
    """`count` images NNNN.png in `folder` and a texts.txt with what each one says."""
    from PIL import Image

    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    lines = []
    for i in range(count):
        text = text_line(rng)
        Image.fromarray(render(text, rng)).save(folder / f"{i:04d}.png")
        lines.append(f"{i:04d}.png\t{text}")
    (folder / "texts.txt").write_text("\n".join(lines) + "\n")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "images" / "rec")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(SEED)
    write_set(args.out / "calib", CALIB, rng)
    write_set(args.out / "eval", EVAL, rng)
    print(f"wrote {CALIB} calibration and {EVAL} evaluation images under {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
