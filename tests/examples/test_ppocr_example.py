"""The PP-OCR example data: rendered text lines the packaged recognizer really reads."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

PPOCR = Path(__file__).resolve().parents[2] / "examples" / "ppocr"
_FOUND = importlib.util.find_spec("rapidocr_onnxruntime")
needs_rapidocr = pytest.mark.skipif(
    _FOUND is None, reason="rapidocr_onnxruntime missing (pip install npuctl[examples])"
)


def package_model(name: str) -> Path:
    assert _FOUND is not None and _FOUND.submodule_search_locations
    return Path(next(iter(_FOUND.submodule_search_locations))) / "models" / name


def texts(split: str) -> dict[str, str]:
    lines = (PPOCR / "images" / "rec" / split / "texts.txt").read_text().splitlines()
    return dict(line.split("\t", 1) for line in lines)


def test_image_sets() -> None:
    from PIL import Image

    for split, count in (("calib", 64), ("eval", 32)):
        names = texts(split)
        files = sorted((PPOCR / "images" / "rec" / split).glob("*.png"))
        assert len(files) == count and {f.name for f in files} == set(names)
        with Image.open(files[0]) as image:
            assert image.mode == "RGB" and image.size == (320, 48)
    calib = {(PPOCR / "images/rec/calib" / n).read_bytes() for n in texts("calib")}
    assert not calib & {(PPOCR / "images/rec/eval" / n).read_bytes() for n in texts("eval")}
    total = sum(p.stat().st_size for p in PPOCR.rglob("*") if p.is_file())
    assert total < 2_000_000


@needs_rapidocr
def test_recognizer_reads_the_eval_lines() -> None:
    import onnx
    import onnxruntime as ort
    from PIL import Image

    path = package_model("ch_PP-OCRv4_rec_infer.onnx")
    meta = {p.key: p.value for p in onnx.load(path, load_external_data=False).metadata_props}
    alphabet = ["<blank>", *meta["character"].splitlines(), " "]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = texts("eval")
    correct = 0
    for name, text in sorted(expected.items()):
        with Image.open(PPOCR / "images" / "rec" / "eval" / name) as image:
            bgr = np.asarray(image, dtype=np.float32)[:, :, ::-1]
        x = ((bgr / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)[None].astype(np.float32)
        steps = session.run(None, {"x": x})[0][0].argmax(axis=1)
        decoded = [alphabet[k] for i, k in enumerate(steps) if k != 0 and (i == 0 or k != steps[i - 1])]
        correct += "".join("".join(decoded).split()) == "".join(text.split())
    assert correct >= 0.9 * len(expected), f"{correct}/{len(expected)} lines read correctly"
