"""Detection heads whose outputs are feature maps, not box tables: decoded per map cell.

- CenterNet-style (CenterFace, TTFNet): a heatmap [1, C, h, w] of class probabilities, a size map
  [1, 2, h, w] and an offset map [1, 2, h, w] at one output stride (input size / map size), in that
  output order (more maps, such as landmarks, are ignored). A box sits at each heatmap cell that is
  the maximum of its 3x3 neighbourhood (CenterNet's max-pool NMS): centre = (cell + offset + 0.5) x
  stride, size = exp(size) x stride; both maps hold (y, x) / (height, width) in that channel order,
  CenterFace's layout.
- Grid (MTCNN's proposal net and other per-cell heads): a score map [1, h, w, K] and a box-regression
  map [1, h, w, 4] (or both channels-first), one fixed-size window per cell: window = (x, y) x stride
  to that + cell, refined by the regression (dx1, dy1, dx2, dy2) x cell. The face/object score is the
  last of the K columns (a two-way softmax's "yes").

Which maps are which is decided from their shapes: the map with 4 channels is a grid head's
regression, two 2-channel maps beside a heatmap are a CenterNet head's size and offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from backends.sdk.errors import TerminalError

if TYPE_CHECKING:
    import numpy as np

MapHead = str
"""'centernet' or 'grid'."""


def channel_axis(shapes: Sequence[tuple[int, ...]]) -> int | None:
    """1 (channels first) or 3 (channels last) when every shape is a rank-4 map with one spatial size
    on that layout (the size more than 1); when both layouts fit, the one whose channels are fewer than
    the map's side. None when the outputs are not maps of one grid."""
    if len(shapes) < 2 or any(len(s) != 4 for s in shapes):
        return None
    fits = []
    for axis, spatial in ((1, (2, 3)), (3, (1, 2))):
        sizes = {tuple(s[i] for i in spatial) for s in shapes}
        if len(sizes) == 1 and min(next(iter(sizes))) > 1:
            fits.append((axis, min(next(iter(sizes)))))
    if len(fits) == 2:
        fits = [(axis, side) for axis, side in fits if max(s[axis] for s in shapes) < side]
    return fits[0][0] if len(fits) == 1 else None


def head_of(shapes: Sequence[tuple[int, ...]]) -> MapHead | None:
    """centernet | grid for map outputs of one grid, None for anything else."""
    axis = channel_axis(shapes)
    if axis is None:
        return None
    channels = [s[axis] for s in shapes]
    if 4 in channels and any(c in (1, 2) for c in channels):
        return "grid"
    if len(shapes) >= 3 and channels[1] == 2 and channels[2] == 2:
        return "centernet"
    return None


def _chw(array: np.ndarray, axis: int) -> np.ndarray:
    """[1, C, h, w] or [1, h, w, C] -> [C, h, w]."""
    import numpy as np

    out = array[0] if axis == 1 else np.moveaxis(array[0], -1, 0)
    return np.asarray(out, dtype=np.float64)


def centernet(
    maps: Sequence[np.ndarray], input_hw: tuple[int, int] | None, threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """Boxes (xyxy, input pixels) and per-class scores [N, C] of the heatmap peaks above `threshold`."""
    import numpy as np

    axis = channel_axis([m.shape for m in maps])
    if axis is None or len(maps) < 3:
        raise TerminalError("a centernet head needs a heatmap, a size map and an offset map of one grid")
    heat, size, offset = (_chw(m, axis) for m in maps[:3])
    h, w = heat.shape[1:]
    stride = (input_hw[0] / h, input_hw[1] / w) if input_hw else (1.0, 1.0)
    best = heat.max(axis=0)
    peaks = (best > threshold) & (best >= _max3x3(best))
    ys, xs = np.nonzero(peaks)
    cy = (ys + offset[0, ys, xs] + 0.5) * stride[0]
    cx = (xs + offset[1, ys, xs] + 0.5) * stride[1]
    bh = np.exp(np.clip(size[0, ys, xs], -20, 20)) * stride[0]
    bw = np.exp(np.clip(size[1, ys, xs], -20, 20)) * stride[1]
    boxes = np.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], 1)
    return boxes, heat[:, ys, xs].T


def _max3x3(grid: np.ndarray) -> np.ndarray:
    import numpy as np

    padded = np.pad(grid, 1, constant_values=-np.inf)
    h, w = grid.shape
    windows = [padded[dy : dy + h, dx : dx + w] for dy in range(3) for dx in range(3)]
    out: np.ndarray = np.max(windows, axis=0)
    return out


def grid(maps: Sequence[np.ndarray], stride: int, cell: int) -> tuple[np.ndarray, np.ndarray]:
    """Boxes (xyxy, input pixels) and scores [N, 1] of every cell of a per-cell head."""
    import numpy as np

    axis = channel_axis([m.shape for m in maps])
    if axis is None:
        raise TerminalError("a grid head needs a score map and a 4-channel box map of one grid")
    chw = [_chw(m, axis) for m in maps]
    regression = next((m for m in chw if m.shape[0] == 4), None)
    scores = next((m for m in chw if m.shape[0] in (1, 2)), None)
    if regression is None or scores is None:
        raise TerminalError("a grid head needs a score map (1 or 2 channels) and a 4-channel box map")
    h, w = scores.shape[1:]
    ys, xs = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    x1, y1 = (xs * stride).reshape(-1).astype(np.float64), (ys * stride).reshape(-1).astype(np.float64)
    window = np.stack([x1, y1, x1 + cell, y1 + cell], 1)
    boxes = window + regression.reshape(4, -1).T * cell
    return boxes, scores[-1].reshape(-1, 1)
