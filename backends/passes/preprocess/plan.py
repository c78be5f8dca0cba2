"""The preprocess section resolved against a model's input (Plan), and the NumPy reference of the
canonical form that the built model is verified against."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from backends.sdk.errors import TerminalError

if TYPE_CHECKING:
    import numpy as np
    import onnx

_GRAY = (0.299, 0.587, 0.114)
"""ITU-R BT.601 luma weights, RGB order (what OpenCV's cvtColor uses)."""


@dataclass
class Plan:
    """The preprocess section resolved against the model's input."""

    input: str
    model_shape: tuple[int, int, int, int]
    layout: str
    dtype: str
    color_from: str | None
    color_to: str | None
    resize_mode: str | None
    raw_hw: tuple[int | str, int | str]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    raw_channels: int = 3
    channel_map: list[list[float]] = field(default_factory=list)
    """A[c][r]: model channel c as a weighted sum of raw channels r."""

    @property
    def raw_shape(self) -> list[int | str]:
        n, _, _h, _w = self.model_shape
        rh, rw = self.raw_hw
        if self.layout == "nhwc":
            return [n, rh, rw, self.raw_channels]
        return [n, self.raw_channels, rh, rw]


def plan_for(model: onnx.ModelProto, pre: Mapping[str, Any]) -> Plan:
    """Validates the spec's preprocess section against the model and resolves it."""
    inits = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in inits]
    name = pre.get("input") or (inputs[0].name if inputs else "")
    vi = next((v for v in inputs if v.name == name), None)
    if vi is None:
        raise TerminalError(f"spec.preprocess.input: the model has no input {name!r}")
    dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    if len(dims) != 4 or not all(d > 0 for d in dims) or vi.type.tensor_type.elem_type != 1:
        raise TerminalError(
            f"spec.preprocess: input {name!r} must be float32 NCHW with a static shape, got {dims}"
        )
    n, c, h, w = dims
    color = pre.get("color") or {}
    cfrom, cto = color.get("from") or color.get("from_"), color.get("to")
    raw_c, cmap = _channel_map(cfrom, cto, c)
    resize = pre.get("resize")
    raw_hw: tuple[int | str, int | str] = (h, w)
    mode = None
    if resize:
        if (int(resize["height"]), int(resize["width"])) != (h, w):
            raise TerminalError(
                f"spec.preprocess.resize: {resize['height']}x{resize['width']} differs from the model input "
                f"{h}x{w}; resize targets the model's size"
            )
        mode = str(resize.get("mode", "linear"))
        sh, sw = resize.get("source_height"), resize.get("source_width")
        raw_hw = (int(sh) if sh else "height", int(sw) if sw else "width")
    mean = _per_channel(pre.get("mean"), c, 0.0, "mean")
    std = _per_channel(pre.get("std"), c, 1.0, "std")
    return Plan(
        name,
        (n, c, h, w),
        str(pre.get("layout") or "nhwc"),
        str(pre.get("dtype") or "uint8"),
        cfrom,
        cto,
        mode,
        raw_hw,
        mean,
        std,
        raw_c,
        cmap,
    )


def _per_channel(values: Sequence[float] | None, c: int, default: float, what: str) -> tuple[float, ...]:
    if not values:
        return (default,) * c
    if len(values) == 1:
        return (float(values[0]),) * c
    if len(values) != c:
        raise TerminalError(f"spec.preprocess.{what}: {len(values)} values for a {c}-channel input")
    return tuple(float(v) for v in values)


def _channel_map(cfrom: str | None, cto: str | None, c: int) -> tuple[int, list[list[float]]]:
    """(raw channel count, A[c][r]) for the color conversion raw -> model."""
    identity = [[1.0 if i == j else 0.0 for j in range(c)] for i in range(c)]
    if cfrom is None or cto is None or cfrom == cto:
        return c, identity
    if cfrom == "gray":
        if c != 3:
            raise TerminalError(
                f"spec.preprocess.color: gray -> {cto} needs a 3-channel model input, not {c}"
            )
        return 1, [[1.0], [1.0], [1.0]]
    if cto == "gray":
        if c != 1:
            raise TerminalError(
                f"spec.preprocess.color: {cfrom} -> gray needs a 1-channel model input, not {c}"
            )
        weights = list(_GRAY) if cfrom == "rgb" else list(reversed(_GRAY))
        return 3, [weights]
    if c != 3:
        raise TerminalError(f"spec.preprocess.color: {cfrom} -> {cto} needs a 3-channel model input, not {c}")
    return 3, [[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]


# ---------------------------------------------------------------- NumPy reference


def resize_matrix(n_in: int, n_out: int, mode: str) -> np.ndarray:
    """[n_out, n_in] interpolation weights of ONNX Resize (half_pixel, no antialias, clamped edges)."""
    import numpy as np

    m = np.zeros((n_out, n_in), np.float64)
    scale = n_in / n_out
    for i in range(n_out):
        x = (i + 0.5) * scale - 0.5
        if mode == "nearest":
            j = int(np.ceil(x - 0.5))  # round_prefer_floor
            m[i, min(max(j, 0), n_in - 1)] = 1.0
        elif mode == "linear":
            x = min(max(x, 0.0), n_in - 1)
            j0 = int(np.floor(x))
            j1 = min(j0 + 1, n_in - 1)
            t = x - j0
            m[i, j0] += 1.0 - t
            m[i, j1] += t
        else:  # cubic, a = -0.75 (ONNX default), edge indices clamped
            j0 = int(np.floor(x))
            t = x - j0
            a = -0.75
            for k in range(-1, 3):
                d = abs(t - k)
                w = (
                    ((a + 2) * d - (a + 3)) * d * d + 1
                    if d <= 1
                    else ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
                )
                m[i, min(max(j0 + k, 0), n_in - 1)] += w
    return m


def reference_input(plan: Plan, raw: np.ndarray) -> np.ndarray:
    """The canonical form in NumPy: raw frame(s) -> the float32 NCHW tensor the model expects."""
    import numpy as np

    x = raw.astype(np.float64)
    if plan.layout == "nhwc":
        x = x.transpose(0, 3, 1, 2)
    a = np.asarray(plan.channel_map, np.float64)
    x = np.einsum("cr,nrhw->nchw", a, x)
    _, _, h, w = plan.model_shape
    if plan.resize_mode is not None:
        mh = resize_matrix(x.shape[2], h, plan.resize_mode)
        mw = resize_matrix(x.shape[3], w, plan.resize_mode)
        x = np.matmul(np.matmul(mh, x), mw.T)
    mean = np.asarray(plan.mean).reshape(1, -1, 1, 1)
    std = np.asarray(plan.std).reshape(1, -1, 1, 1)
    return ((x - mean) / std).astype(np.float32)


def random_raw(plan: Plan, seed: int = 0, size: tuple[int, int] | None = None) -> np.ndarray:
    """A seeded raw frame of the plan's shape (dynamic H/W take `size`, default 2x the model's + odd)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    _, _, h, w = plan.model_shape
    default = (2 * h + 7, 2 * w + 13)
    dims = [
        (size or default)[0] if d == "height" else (size or default)[1] if d == "width" else int(d)
        for d in plan.raw_shape
    ]
    if plan.dtype == "uint8":
        return rng.integers(0, 256, size=dims, dtype=np.uint8)
    return rng.uniform(0, 255, size=dims).astype(np.float32)
