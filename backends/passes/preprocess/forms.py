"""The spec's one canonical preprocessing form, converted to each toolchain's own convention.

Canonical: the model input is (x - mean[c]) / std[c], with x the raw pixel (0-255 scale) after the
color conversion, and mean/std listed in the model's channel order (`color.to`). The vendors write it
four ways:

- RKNN `rknn.config(mean_values, std_values)`: (x - mean) / std per channel of the input *as fed*; it
  reorders nothing at run time (quant_img_RGB2BGR only affects calibration reading), so a BGR -> RGB
  swap must stay in the model and the values are given in the fed order.
- CANN AIPP (insert_op.proto `aipp_op`): (x - mean_chn - min_chn) * var_reci_chn after the optional R/B
  swap (`rbuv_swap_switch`); mean_chn is an integer, so a fractional mean goes to min_chn.
- Core ML `ImageType(scale, bias, color_layout)`: x * scale + bias with one scalar scale, so only equal
  std values convert (otherwise the std stays folded in the model).
- OpenVINO PrePostProcessor: `mean(values)` then `scale(values)` (a division), after
  `convert_color`; element type, layout and resize are declared on the tensor.

Each `*_form` returns plain data (JSON-able); `*_apply` evaluates that vendor's documented formula in
NumPy, which the tests compare with `canonical_apply` (the spec's meaning).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Canonical:
    """The spec's preprocess section, normalized."""

    mean: tuple[float, ...]
    std: tuple[float, ...]
    color_from: str | None
    color_to: str | None
    layout: str = "nhwc"
    dtype: str = "uint8"

    @property
    def swap(self) -> bool:
        """Whether the app's channel order is the reverse of the model's (BGR <-> RGB)."""
        return {self.color_from, self.color_to} == {"rgb", "bgr"}


def canonical(preprocess: Mapping[str, Any], channels: int = 3) -> Canonical:
    """From the spec's `preprocess` dict (aliases as dumped: color has key "from")."""
    mean = preprocess.get("mean") or [0.0] * channels
    std = preprocess.get("std") or [1.0] * channels
    if len(mean) == 1:
        mean = list(mean) * channels
    if len(std) == 1:
        std = list(std) * channels
    color = preprocess.get("color") or {}
    return Canonical(
        mean=tuple(float(m) for m in mean),
        std=tuple(float(s) for s in std),
        color_from=color.get("from") or color.get("from_"),
        color_to=color.get("to"),
        layout=str(preprocess.get("layout") or "nhwc"),
        dtype=str(preprocess.get("dtype") or "uint8"),
    )


def canonical_apply(form: Canonical, raw_hwc: np.ndarray) -> np.ndarray:
    """The spec's meaning on one raw HWC image in the app's channel order: the model's CHW input."""
    import numpy as np

    x = raw_hwc.astype(np.float64)
    if form.swap:
        x = x[..., ::-1]
    mean = np.asarray(form.mean, np.float64)
    std = np.asarray(form.std, np.float64)
    return ((x - mean) / std).transpose(2, 0, 1)


# ---------------------------------------------------------------- RKNN


def rknn_form(form: Canonical) -> dict[str, Any]:
    """rknn.config arguments; values in the fed channel order (the swap itself stays in the model)."""
    mean, std = list(form.mean), list(form.std)
    if form.swap:
        mean, std = mean[::-1], std[::-1]
    return {
        "mean_values": [mean],
        "std_values": [std],
        "channel_swap_in_model": form.swap,
        "note": "RKNN normalizes the input as fed; a BGR<->RGB swap is kept in the ONNX model",
    }


def rknn_apply(args: Mapping[str, Any], raw_hwc: np.ndarray) -> np.ndarray:
    """RKNN's formula: (x - mean_values[0][c]) / std_values[0][c] on the fed channels; then the model's
    own channel swap (when channel_swap_in_model)."""
    import numpy as np

    x = (raw_hwc.astype(np.float64) - np.asarray(args["mean_values"][0])) / np.asarray(args["std_values"][0])
    if args["channel_swap_in_model"]:
        x = x[..., ::-1]
    return x.transpose(2, 0, 1)


# ---------------------------------------------------------------- CANN AIPP


def aipp_form(form: Canonical, height: int, width: int) -> dict[str, Any]:
    """aipp_op fields for a static AIPP on packed 8-bit RGB/BGR input (AIPP takes integer images only)."""
    import math

    if form.dtype != "uint8" or form.layout != "nhwc":
        return {
            "supported": False,
            "note": "AIPP takes packed 8-bit images (uint8 NHWC); this input is "
            f"{form.dtype} {form.layout}, so preprocessing stays in the model",
        }
    channels = len(form.mean)
    if channels not in (1, 3):
        return {"supported": False, "note": f"AIPP takes 1- or 3-channel images, not {channels}"}
    fields: dict[str, Any] = {
        "aipp_mode": "static",
        "input_format": "RGB888_U8" if channels == 3 else "YUV400_U8",
        "src_image_size_w": width,
        "src_image_size_h": height,
        "csc_switch": False,
        "rbuv_swap_switch": form.swap,
    }
    for c in range(channels):
        whole = math.floor(form.mean[c])
        fields[f"mean_chn_{c}"] = int(whole)
        fields[f"min_chn_{c}"] = float(form.mean[c] - whole)
        fields[f"var_reci_chn_{c}"] = float(1.0 / form.std[c])
    return {"supported": True, "aipp_op": fields, "config": aipp_config_text(fields)}


def aipp_config_text(fields: Mapping[str, Any]) -> str:
    """The insert_op configuration file ATC reads with --insert_op_conf."""
    lines = ["aipp_op {"]
    for key, value in fields.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, float):
            text = repr(float(f"{value:.9g}"))
        else:
            text = str(value)
        lines.append(f"    {key} : {text}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def aipp_apply(form_out: Mapping[str, Any], raw_hwc: np.ndarray) -> np.ndarray:
    """AIPP's formula: optional R/B swap, then (x - mean_chn - min_chn) * var_reci_chn."""
    import numpy as np

    f = form_out["aipp_op"]
    x = raw_hwc.astype(np.float64)
    if f["rbuv_swap_switch"]:
        x = x[..., ::-1]
    channels = 3 if f["input_format"] == "RGB888_U8" else 1
    mean = np.array([f[f"mean_chn_{c}"] for c in range(channels)], np.float64)
    low = np.array([f[f"min_chn_{c}"] for c in range(channels)], np.float64)
    reci = np.array([f[f"var_reci_chn_{c}"] for c in range(channels)], np.float64)
    return ((x - mean - low) * reci).transpose(2, 0, 1)


# ---------------------------------------------------------------- Core ML


def coreml_form(form: Canonical) -> dict[str, Any]:
    """coremltools ImageType(scale, bias, color_layout) arguments; one scalar scale only."""
    if len(set(form.std)) != 1:
        return {
            "supported": False,
            "note": "Core ML's ImageType has one scalar scale; per-channel std stays folded in the model",
        }
    scale = 1.0 / form.std[0]
    bias = [-m / s for m, s in zip(form.mean, form.std, strict=False)]
    layout = (form.color_to or "rgb").upper()
    return {"supported": True, "scale": scale, "bias": bias, "color_layout": layout}


def coreml_apply(args: Mapping[str, Any], raw_hwc: np.ndarray, fed: str | None) -> np.ndarray:
    """Core ML's formula: the image is delivered in `color_layout`, then x * scale + bias[c]."""
    import numpy as np

    x = raw_hwc.astype(np.float64)
    if fed and {fed.upper(), args["color_layout"]} == {"RGB", "BGR"}:
        x = x[..., ::-1]
    return (x * args["scale"] + np.asarray(args["bias"])).transpose(2, 0, 1)


# ---------------------------------------------------------------- OpenVINO


def openvino_form(form: Canonical, resize: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """PrePostProcessor arguments, in call order."""
    out: dict[str, Any] = {
        "tensor": {
            "element_type": "u8" if form.dtype == "uint8" else "f32",
            "layout": form.layout.upper(),
            "color_format": (form.color_from or "rgb").upper(),
        },
        "preprocess": {
            "convert_element_type": "f32",
            "convert_color": (form.color_to or form.color_from or "rgb").upper(),
            "mean": list(form.mean),
            "scale": list(form.std),
        },
        "model": {"layout": "NCHW"},
    }
    if resize:
        out["preprocess"]["resize"] = {
            "linear": "RESIZE_LINEAR",
            "nearest": "RESIZE_NEAREST",
            "cubic": "RESIZE_CUBIC",
        }[str(resize.get("mode", "linear"))]
    return out


def openvino_apply(args: Mapping[str, Any], raw_hwc: np.ndarray) -> np.ndarray:
    """OpenVINO's documented order: convert_color, then mean (subtract), then scale (divide)."""
    import numpy as np

    x = raw_hwc.astype(np.float64)
    if {args["tensor"]["color_format"], args["preprocess"]["convert_color"]} == {"RGB", "BGR"}:
        x = x[..., ::-1]
    p = args["preprocess"]
    return ((x - np.asarray(p["mean"])) / np.asarray(p["scale"])).transpose(2, 0, 1)


def openvino_build(model: Any, args: Mapping[str, Any]) -> Any:
    """Applies the arguments to an openvino.Model with the real PrePostProcessor; returns the new model."""
    import openvino as ov
    from openvino.preprocess import ColorFormat, PrePostProcessor, ResizeAlgorithm

    ppp = PrePostProcessor(model)
    t = args["tensor"]
    ppp.input().tensor().set_element_type(ov.Type.u8 if t["element_type"] == "u8" else ov.Type.f32)
    ppp.input().tensor().set_layout(ov.Layout(t["layout"])).set_color_format(
        getattr(ColorFormat, t["color_format"])
    )
    p = args["preprocess"]
    steps = ppp.input().preprocess()
    steps.convert_element_type(ov.Type.f32)
    steps.convert_color(getattr(ColorFormat, p["convert_color"]))
    if "resize" in p:
        steps.resize(getattr(ResizeAlgorithm, p["resize"]))
    steps.mean(list(p["mean"])).scale(list(p["scale"]))
    ppp.input().model().set_layout(ov.Layout(args["model"]["layout"]))
    return ppp.build()


def all_forms(
    form: Canonical, height: int, width: int, resize: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Every vendor form of one canonical preprocessing, for the stage report and the compile adapters."""
    return {
        "rknn": rknn_form(form),
        "cann_aipp": aipp_form(form, height, width),
        "coreml": coreml_form(form),
        "openvino": openvino_form(form, resize),
    }
