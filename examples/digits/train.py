#!/usr/bin/env python3
"""Train the digits example CNN and write model.onnx plus its calibration and evaluation data.

scikit-learn's handwritten digits (8x8 grayscale, pixel values 0-16, 10 classes) ship inside the
scikit-learn wheel, so this needs no download. The ONNX graph is built by hand with onnx.helper from
the trained weights (opset 17) instead of torch.onnx.export, so the file does not depend on exporter
versions; the script checks that ONNX Runtime reproduces torch's logits within 1e-5.

Retraining needs PyTorch, which is NOT a dependency of npuctl:

    pip install torch==2.13.0 scikit-learn pillow
    python examples/digits/train.py            # rewrites model.onnx, data/ and images/ here

Outputs (relative to --out, default: this folder):
    model.onnx                 input `image` float32 [N,1,8,8] (pixel/16), output `logits` [N,10]
    data/calib/NNNN.npy        300 training samples, float32 [1,1,8,8]
    data/eval/NNNN.npy         the held-out test split, float32 [1,1,8,8]
    data/eval/labels.txt       `<file name> <label>` per line
    images/{calib,eval}/NNNN.png  the same samples as uint8 grayscale PNGs (round(pixel*255/16))
    images/eval/labels.txt
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
SEED = 0
TEST_FRACTION = 0.2
CALIB_SAMPLES = 300
EPOCHS = 40
BATCH = 32
OPSET = 17
IR_VERSION = 8
"""IR 8 (ONNX 1.10+) goes with opset 17, so older ONNX Runtime builds on devices load the file too."""


def load_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test); x as uint8 pixel values 0-16, shape [n, 8, 8]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = digits.images.astype(np.uint8)
    x_train, x_test, y_train, y_test = train_test_split(
        images, digits.target, test_size=TEST_FRACTION, random_state=SEED, stratify=digits.target
    )
    return x_train, y_train.astype(np.int64), x_test, y_test.astype(np.int64)


def to_float(pixels: np.ndarray) -> np.ndarray:
    """uint8 pixels 0-16 [n,8,8] -> the model's float32 input [n,1,8,8] in [0, 1]."""
    return (pixels.astype(np.float32) / 16.0)[:, None, :, :]


def to_png_pixels(pixels: np.ndarray) -> np.ndarray:
    """uint8 pixels 0-16 -> uint8 0-255, so that png / 255 equals the float input."""
    return np.rint(pixels.astype(np.float64) * 255.0 / 16.0).astype(np.uint8)


def build_net() -> Any:
    import torch
    from torch import nn

    torch.manual_seed(SEED)
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def train(x: np.ndarray, y: np.ndarray, epochs: int = EPOCHS) -> Any:
    """A seeded, single-threaded training run (same machine and torch version -> same weights)."""
    import torch

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    net = build_net()
    generator = torch.Generator().manual_seed(SEED)
    inputs = torch.from_numpy(to_float(x))
    targets = torch.from_numpy(y)
    optimizer = torch.optim.Adam(net.parameters(), lr=2e-3)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    loss_fn = torch.nn.CrossEntropyLoss()
    for _ in range(epochs):
        net.train()
        order = torch.randperm(len(inputs), generator=generator)
        for start in range(0, len(order), BATCH):
            batch = order[start : start + BATCH]
            optimizer.zero_grad()
            loss_fn(net(inputs[batch]), targets[batch]).backward()
            optimizer.step()
        scheduler.step()
    net.eval()
    return net


def export_onnx(net: Any) -> Any:
    """The trained net as an ONNX ModelProto built node by node (Conv, BatchNormalization, Relu, ...)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    conv1, bn1, _, conv2, _, _, _, fc1, _, fc2 = list(net)

    def weight(name: str, tensor: Any) -> Any:
        return numpy_helper.from_array(tensor.detach().numpy().astype(np.float32), name)

    initializers = [
        weight("conv1.weight", conv1.weight),
        weight("conv1.bias", conv1.bias),
        weight("bn1.scale", bn1.weight),
        weight("bn1.bias", bn1.bias),
        weight("bn1.mean", bn1.running_mean),
        weight("bn1.var", bn1.running_var),
        weight("conv2.weight", conv2.weight),
        weight("conv2.bias", conv2.bias),
        weight("fc1.weight", fc1.weight),
        weight("fc1.bias", fc1.bias),
        weight("fc2.weight", fc2.weight),
        weight("fc2.bias", fc2.bias),
    ]
    conv: dict[str, Any] = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [1, 1]}
    nodes = [
        helper.make_node("Conv", ["image", "conv1.weight", "conv1.bias"], ["c1"], name="/conv1/Conv", **conv),
        helper.make_node(
            "BatchNormalization",
            ["c1", "bn1.scale", "bn1.bias", "bn1.mean", "bn1.var"],
            ["b1"],
            name="/bn1/BatchNormalization",
            epsilon=float(bn1.eps),
        ),
        helper.make_node("Relu", ["b1"], ["r1"], name="/relu1/Relu"),
        helper.make_node("Conv", ["r1", "conv2.weight", "conv2.bias"], ["c2"], name="/conv2/Conv", **conv),
        helper.make_node("Relu", ["c2"], ["r2"], name="/relu2/Relu"),
        helper.make_node(
            "MaxPool", ["r2"], ["p2"], name="/pool/MaxPool", kernel_shape=[2, 2], strides=[2, 2]
        ),
        helper.make_node("Flatten", ["p2"], ["f"], name="/flatten/Flatten", axis=1),
        helper.make_node("Gemm", ["f", "fc1.weight", "fc1.bias"], ["g1"], name="/fc1/Gemm", transB=1),
        helper.make_node("Relu", ["g1"], ["r3"], name="/relu3/Relu"),
        helper.make_node("Gemm", ["r3", "fc2.weight", "fc2.bias"], ["logits"], name="/head/Gemm", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "digits_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        initializer=initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="npuctl-examples-digits",
        producer_version="1",
        doc_string="Small CNN for scikit-learn's 8x8 digits; input pixel/16; see examples/digits/README.md.",
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def torch_logits(net: Any, x: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        out: np.ndarray = net(torch.from_numpy(x)).numpy()
    return out


def ort_logits(model_bytes: bytes, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    out: np.ndarray = session.run(["logits"], {"image": x})[0]
    return out


def write_samples(folder: Path, pixels: np.ndarray, labels: np.ndarray | None, kind: str) -> list[str]:
    """One file per sample; `kind` npy (float32 [1,1,8,8]) or png (uint8 gray 8x8). Returns file names."""
    from PIL import Image

    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    names: list[str] = []
    for i, sample in enumerate(pixels):
        name = f"{i:04d}.{kind}"
        if kind == "npy":
            np.save(folder / name, to_float(sample[None])[0:1])
        else:
            Image.fromarray(to_png_pixels(sample)).save(folder / name, optimize=False)
        names.append(name)
    if labels is not None:
        lines = [f"{name} {int(label)}" for name, label in zip(names, labels, strict=True)]
        (folder / "labels.txt").write_text("\n".join(lines) + "\n")
    return names


def calibration_subset(x_train: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(SEED)
    return x_train[np.sort(rng.permutation(len(x_train))[:CALIB_SAMPLES])]


def assert_disjoint(a: np.ndarray, b: np.ndarray) -> None:
    """Calibration and evaluation samples must not share an image (compared by content)."""
    seen = {sample.tobytes() for sample in a}
    shared = sum(sample.tobytes() in seen for sample in b)
    if shared:
        raise SystemExit(f"calibration and evaluation sets share {shared} images")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="output folder (default: this example's)")
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    args = parser.parse_args(argv)

    import torch

    x_train, y_train, x_test, y_test = load_split()
    calib = calibration_subset(x_train)
    assert_disjoint(calib, x_test)
    net = train(x_train, y_train, args.epochs)
    model = export_onnx(net)
    model_bytes = model.SerializeToString()

    eval_inputs = to_float(x_test)
    expected = torch_logits(net, eval_inputs)
    got = ort_logits(model_bytes, eval_inputs)
    max_diff = float(np.abs(expected - got).max())
    if max_diff > 1e-5:
        raise SystemExit(f"ONNX Runtime differs from torch by {max_diff:.2e} (> 1e-5)")
    accuracy = float((got.argmax(axis=1) == y_test).mean())

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "model.onnx").write_bytes(model_bytes)
    write_samples(args.out / "data" / "calib", calib, None, "npy")
    write_samples(args.out / "data" / "eval", x_test, y_test, "npy")
    write_samples(args.out / "images" / "calib", calib, None, "png")
    write_samples(args.out / "images" / "eval", x_test, y_test, "png")
    summary = {
        "torch": torch.__version__,
        "test_accuracy": round(accuracy, 4),
        "test_samples": len(x_test),
        "calibration_samples": len(calib),
        "max_abs_diff_torch_vs_ort": max_diff,
        "epochs": args.epochs,
    }
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
