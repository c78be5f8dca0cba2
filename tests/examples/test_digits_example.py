"""The committed digits example: a real model that reaches > 95 % on its committed, labelled eval set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

DIGITS = Path(__file__).resolve().parents[2] / "examples" / "digits"


def read_labels(path: Path) -> dict[str, int]:
    labels: dict[str, int] = {}
    for line in path.read_text().splitlines():
        name, label = line.split()
        labels[name] = int(label)
    return labels


def load_npy_folder(folder: Path) -> dict[str, np.ndarray]:
    return {p.name: np.load(p) for p in sorted(folder.glob("*.npy"))}


def load_png_folder(folder: Path) -> dict[str, np.ndarray]:
    from PIL import Image

    out = {}
    for p in sorted(folder.glob("*.png")):
        with Image.open(p) as image:
            assert image.mode == "L" and image.size == (8, 8)
            out[p.name] = np.asarray(image)
    return out


@pytest.fixture(scope="module")
def session():  # type: ignore[no-untyped-def]
    import onnxruntime as ort

    return ort.InferenceSession(str(DIGITS / "model.onnx"), providers=["CPUExecutionProvider"])


def test_model_interface() -> None:
    import onnx

    model = onnx.load(DIGITS / "model.onnx")
    onnx.checker.check_model(model, full_check=True)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    (image,) = model.graph.input
    dims = image.type.tensor_type.shape.dim
    assert image.name == "image" and image.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert dims[0].dim_param == "N" and [d.dim_value for d in dims[1:]] == [1, 8, 8]
    (logits,) = model.graph.output
    assert logits.name == "logits"
    assert [d.dim_param or d.dim_value for d in logits.type.tensor_type.shape.dim] == ["N", 10]
    assert "BatchNormalization" in {n.op_type for n in model.graph.node}


def test_accuracy_on_the_committed_eval_set(session) -> None:  # type: ignore[no-untyped-def]
    labels = read_labels(DIGITS / "data" / "eval" / "labels.txt")
    samples = load_npy_folder(DIGITS / "data" / "eval")
    assert set(labels) == set(samples) and 340 <= len(samples) <= 380
    batch = np.concatenate([samples[name] for name in sorted(samples)])
    assert batch.dtype == np.float32 and batch.shape == (len(samples), 1, 8, 8)
    logits = session.run(["logits"], {"image": batch})[0]
    truth = np.array([labels[name] for name in sorted(samples)])
    accuracy = float((logits.argmax(axis=1) == truth).mean())
    assert accuracy > 0.95, accuracy
    assert set(truth.tolist()) == set(range(10))


def test_predictions_are_not_constant(session) -> None:  # type: ignore[no-untyped-def]
    """A guard against a broken model that happens to match a skewed label file."""
    batch = np.concatenate(list(load_npy_folder(DIGITS / "data" / "calib").values()))
    predicted = session.run(["logits"], {"image": batch})[0].argmax(axis=1)
    assert len(set(predicted.tolist())) == 10


def test_calibration_set() -> None:
    calib = load_npy_folder(DIGITS / "data" / "calib")
    assert len(calib) == 300
    for array in calib.values():
        assert array.dtype == np.float32 and array.shape == (1, 1, 8, 8)
        assert array.min() >= 0.0 and array.max() <= 1.0


def test_calibration_and_evaluation_do_not_overlap() -> None:
    calib = {a.tobytes() for a in load_npy_folder(DIGITS / "data" / "calib").values()}
    evaluation = [a.tobytes() for a in load_npy_folder(DIGITS / "data" / "eval").values()]
    assert not calib & set(evaluation)
    calib_png = {a.tobytes() for a in load_png_folder(DIGITS / "images" / "calib").values()}
    eval_png = {a.tobytes() for a in load_png_folder(DIGITS / "images" / "eval").values()}
    assert not calib_png & eval_png


@pytest.mark.parametrize("split", ["calib", "eval"])
def test_png_images_are_the_same_samples(split: str) -> None:
    npy = load_npy_folder(DIGITS / "data" / split)
    png = load_png_folder(DIGITS / "images" / split)
    assert set(npy) == {name.replace(".png", ".npy") for name in png}
    for name, image in png.items():
        pixels16 = npy[name.replace(".png", ".npy")][0, 0] * 16
        assert np.array_equal(image, np.rint(pixels16 * 255 / 16).astype(np.uint8))
    if split == "eval":
        npy_labels = read_labels(DIGITS / "data" / "eval" / "labels.txt")
        png_labels = read_labels(DIGITS / "images" / "eval" / "labels.txt")
        assert {k.replace(".npy", ""): v for k, v in npy_labels.items()} == {
            k.replace(".png", ""): v for k, v in png_labels.items()
        }


def test_example_stays_small() -> None:
    total = sum(p.stat().st_size for p in DIGITS.rglob("*") if p.is_file())
    assert total < 2_000_000, total
