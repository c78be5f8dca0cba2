"""Calibration: activation ranges from real samples, computed once and cached by what determines them.

The ranges depend on the exact calibration bytes used, the model bytes, the method and its settings,
and ONNX Runtime's version, and on nothing else: the cache key is the digest of exactly those, so a
change to `sensitive_layers` (or to the weight type) reuses the ranges instead of recalibrating.
Samples are read through `backends.passes.data` (the one sample reader) one chunk at a time into one
session, and the ranges are merged after every chunk, so memory stays bounded whatever the sample count.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.passes import data
from backends.sdk.errors import TerminalError, one_line

if TYPE_CHECKING:
    import numpy as np
    from onnxruntime.quantization import CalibrationMethod, TensorsData

CACHE_FORMAT = "1"
"""Bump when the cached file's meaning changes; it is part of every cache key."""

CHUNK = 4
"""Samples per collect call of the histogram methods: they keep every tensor of every sample in a chunk,
and their bins depend on the chunking, so it stays fixed. Min/max merges exactly: one sample per call."""


@dataclass(frozen=True)
class Settings:
    """What, besides samples and model, determines the ranges."""

    method: str = "minmax"
    percentile: float = 99.999
    symmetric: bool = False

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, "symmetric": self.symmetric}
        if self.method == "percentile":
            out["percentile"] = self.percentile
        return out


@dataclass
class Calibration:
    """Where the ranges are, and how they were obtained (for the report)."""

    ranges: Path
    digest: str
    cache: str
    """hit | miss | off (no cache folder given: computed for this run only)."""
    samples: list[str]
    seconds: float
    cache_file: str | None = None
    peak_rss_mb: float | None = None
    notes: list[str] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "cache": self.cache,
            "digest": self.digest,
            "samples_used": len(self.samples),
            "sample_files": self.samples,
            "seconds": round(self.seconds, 3),
        }
        if self.cache_file:
            out["cache_file"] = self.cache_file
        if self.peak_rss_mb is not None:
            out["peak_rss_mb"] = round(self.peak_rss_mb, 1)
        if self.notes:
            out["notes"] = self.notes
        return out


def ort_method(name: str) -> CalibrationMethod:
    from onnxruntime.quantization import CalibrationMethod

    try:
        return {
            "minmax": CalibrationMethod.MinMax,
            "entropy": CalibrationMethod.Entropy,
            "percentile": CalibrationMethod.Percentile,
        }[name]
    except KeyError:
        raise TerminalError(f"quantization.calibration.method: unknown method {name!r}") from None


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cache_key(model: Path, files: Sequence[Path], settings: Settings) -> str:
    """Digest of (samples used, in order, by content; model bytes; method settings; ORT version)."""
    h = hashlib.sha256()
    h.update(f"npuctl-calibration {CACHE_FORMAT}\n".encode())
    h.update(f"onnxruntime {version('onnxruntime')}\n".encode())
    h.update(json.dumps(settings.as_dict(), sort_keys=True).encode() + b"\n")
    h.update(f"model {file_digest(model)}\n".encode())
    for path in files:
        h.update(f"sample {file_digest(path)}\n".encode())
    return h.hexdigest()


class ChunkReader:
    """ONNX Runtime's CalibrationDataReader protocol over a list of feeds."""

    def __init__(self, feeds: Sequence[dict[str, np.ndarray]]) -> None:
        self._feeds = list(feeds)
        self._i = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self._i >= len(self._feeds):
            return None
        self._i += 1
        return self._feeds[self._i - 1]

    def __len__(self) -> int:
        return len(self._feeds)

    def rewind(self) -> None:
        self._i = 0


def _chunks(model: Path, files: Sequence[Path], size: int) -> Iterator[list[dict[str, np.ndarray]]]:
    inputs = data.model_inputs(model)
    chunk: list[dict[str, np.ndarray]] = []
    for path in files:
        chunk.append(data.read_sample(path, inputs).feed)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def compute_ranges(
    model: Path, files: Sequence[Path], settings: Settings, op_types: Sequence[str], scratch: Path
) -> TensorsData:
    """Runs ONNX Runtime's calibrator over `files` (chunk by chunk) and returns the tensor ranges."""
    from onnxruntime.quantization.calibrate import create_calibrator

    extra: dict[str, Any] = {"symmetric": settings.symmetric}
    if settings.method == "percentile":
        extra["percentile"] = settings.percentile
    try:
        calibrator = create_calibrator(
            model,
            list(op_types),
            augmented_model_path=str(scratch / "augmented.onnx"),
            calibrate_method=ort_method(settings.method),
            providers=["CPUExecutionProvider"],
            extra_options=extra,
        )
        calibrator.infer_session = _session(calibrator.augmented_model_path)
        size = 1 if settings.method == "minmax" else CHUNK
        with contextlib.redirect_stdout(io.StringIO()):  # the histogram calibrators print per chunk
            for chunk in _chunks(model, files, size):
                calibrator.collect_data(ChunkReader(chunk))
            ranges = calibrator.compute_data()
    except TerminalError:
        raise
    except Exception as exc:  # noqa: BLE001 - ORT raises plain Exceptions/RuntimeErrors
        raise TerminalError(f"calibration failed: {one_line(exc)}") from exc
    return ranges


def _session(augmented: str) -> Any:
    """The augmented model's session, as ORT's calibrators build it (no graph optimization, so every
    calibrated tensor exists as in the graph) but in priority-based order. ORT's default order runs the
    ReduceMin/ReduceMax leaves last, keeping every intermediate tensor of a sample alive until the end:
    1.44 GB for PP-OCRv4 det at 640x640, against 0.19 GB (and ~half the time) here. Same kernels, so the
    same ranges. Its threads sleep between kernels instead of spinning: on a shared machine spinning
    measured 1.8x the CPU and 1.5x the wall time of one calibration run."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(augmented, sess_options=options, providers=["CPUExecutionProvider"])


def _peak_rss_mb() -> float | None:
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    except (ImportError, OSError):
        return None


def calibrate(
    model: Path,
    files: Sequence[Path],
    settings: Settings,
    op_types: Sequence[str],
    scratch: Path,
    cache_dir: Path | None,
) -> Calibration:
    """Ranges for `model` over `files`: from `cache_dir` when cached, else computed (and stored there)."""
    from onnxruntime.quantization.calibrate import save_tensors_data

    started = time.perf_counter()
    digest = cache_key(model, files, settings)
    names = [p.name for p in files]
    if cache_dir is not None:
        cached = cache_dir / f"{digest}.json"
        if cached.is_file() and _loadable(cached):
            return Calibration(cached, digest, "hit", names, time.perf_counter() - started, str(cached))
    with tempfile.TemporaryDirectory(dir=scratch, prefix="calib-") as tmp:
        ranges = compute_ranges(model, files, settings, op_types, Path(tmp))
    if cache_dir is None:
        out = scratch / f"ranges-{digest[:16]}.json"
        save_tensors_data(ranges, out)
        return Calibration(out, digest, "off", names, time.perf_counter() - started, None, _peak_rss_mb())
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / f"{digest}.json"
    _store(ranges, target)
    return Calibration(
        target, digest, "miss", names, time.perf_counter() - started, str(target), _peak_rss_mb()
    )


def _loadable(path: Path) -> bool:
    """A cache entry that does not parse (a torn write from another tool) is recomputed, not trusted."""
    from onnxruntime.quantization.calibrate import load_tensors_data

    try:
        load_tensors_data(path)
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return True


def _store(ranges: TensorsData, target: Path) -> None:
    """Written to a temp file then renamed: a crash never leaves a half-written cache entry."""
    from onnxruntime.quantization.calibrate import save_tensors_data

    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".ranges-", suffix=".json")
    os.close(fd)
    try:
        save_tensors_data(ranges, tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
