"""The arithmetic of accuracy and fidelity, one sample at a time.

Every measure here is a sum over samples (agreeing positions, signal and noise energy, map
intersections and unions), so evaluate can score an evaluation set of any size while
holding one sample's outputs of each model, never all of them. The decisions (which measure, what
an SLO is judged on) are in backends.passes.accuracy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

SQNR_CAP_DB = 200.0
"""SQNR is clamped to +-200 dB (identical outputs would be +inf): JSON-safe, and far above the ~150 dB
float32 rounding floor, so the clamp never hides a real difference."""

MAP_THRESHOLDS = (0.5, 0.0)
"""A dense map is binarized at 0.5 when it holds probabilities (values in [0, 1]), else at 0 (logits)."""


def as_float(x: Any) -> np.ndarray:
    import numpy as np

    return np.asarray(x, dtype=np.float64)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    import numpy as np

    a, b = a.reshape(-1), b.reshape(-1)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return 0.0
    # einsum, not BLAS norm/dot: BLAS wakes its thread pool for each small call, which cost the auto
    # search ~4 ms a call beside ONNX Runtime's own threads (22 s of a 146 s search, cProfile)
    na = math.sqrt(float(np.einsum("i,i->", a, a)))
    nb = math.sqrt(float(np.einsum("i,i->", b, b)))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.clip(float(np.einsum("i,i->", a, b)) / (na * nb), -1.0, 1.0))


@dataclass
class Sqnr:
    """10*log10(sum ref^2 / sum (ref - out)^2) over every sample added, clamped to +-SQNR_CAP_DB."""

    signal: float = 0.0
    noise: float = 0.0

    def add(self, reference: Any, output: Any) -> None:
        r, o = as_float(reference), as_float(output)
        self.signal += float((r**2).sum())
        self.noise += float(((r - o) ** 2).sum())

    def value(self) -> float:
        if not (math.isfinite(self.signal) and math.isfinite(self.noise)):
            return -SQNR_CAP_DB
        if self.noise == 0.0:
            return SQNR_CAP_DB
        if self.signal == 0.0:
            return -SQNR_CAP_DB
        return float(max(-SQNR_CAP_DB, min(SQNR_CAP_DB, 10.0 * math.log10(self.signal / self.noise))))


@dataclass
class MapIou:
    """IoU of single-channel dense maps ([1, 1, H, W], H and W > 1) binarized, summed over samples (the
    pooled IoU) and per sample, at both MAP_THRESHOLDS and at a declared `extra` threshold; which of
    the two defaults applies is known only once every reference value has been seen."""

    extra: float | None = None
    inter: dict[float, int] = field(default_factory=dict)
    union: dict[float, int] = field(default_factory=dict)
    per_image: dict[float, list[float]] = field(default_factory=dict)
    is_map: bool = True
    low: float = math.inf
    high: float = -math.inf
    samples: int = 0

    def thresholds(self) -> tuple[float, ...]:
        return (
            MAP_THRESHOLDS
            if self.extra is None or self.extra in MAP_THRESHOLDS
            else (*MAP_THRESHOLDS, self.extra)
        )

    def add(self, reference: Any, output: Any) -> None:
        import numpy as np

        r, o = np.asarray(reference), np.asarray(output)
        shaped = r.ndim == 4 and r.shape[1] == 1 and r.shape[2] > 1 and r.shape[3] > 1 and r.shape == o.shape
        if not shaped or not self.is_map:
            self.is_map = False
            return
        self.samples += 1
        if r.size:
            self.low, self.high = min(self.low, float(r.min())), max(self.high, float(r.max()))
        for threshold in self.thresholds():
            rb, ob = r > threshold, o > threshold
            inter, union = int((rb & ob).sum()), int((rb | ob).sum())
            self.inter[threshold] = self.inter.get(threshold, 0) + inter
            self.union[threshold] = self.union.get(threshold, 0) + union
            self.per_image.setdefault(threshold, []).append(inter / union if union else 1.0)

    def threshold(self) -> float:
        return MAP_THRESHOLDS[0] if self.low >= 0.0 and self.high <= 1.0 else MAP_THRESHOLDS[1]

    def value(self, threshold: float | None = None) -> float | None:
        """The pooled IoU: intersections over unions summed over every sample."""
        if not self.is_map or not self.samples:
            return None
        t = self.threshold() if threshold is None else threshold
        return self.inter[t] / self.union[t] if self.union[t] else 1.0

    def image_values(self, threshold: float | None = None) -> list[float]:
        """Each sample's own IoU (a sample where both maps are empty scores 1)."""
        if not self.is_map or not self.samples:
            return []
        return list(self.per_image[self.threshold() if threshold is None else threshold])
