"""One sample file read into a feed: `.npy`, `.npz` (one array per input) or an image, each array coerced
to its input's shape and dtype. Sizes are checked before anything is inflated: sample folders come from
repositories, which are untrusted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.sdk import pathpolicy
from backends.sdk.errors import TerminalError

if TYPE_CHECKING:
    import numpy as np

    from backends.passes.data import Color, InputSpec


MAX_SAMPLE_BYTES_PER_ELEMENT = 16
"""A sample may hold at most this many bytes per element of the inputs it feeds (complex128), plus a
header: a larger `.npy`, or an `.npz` member that would inflate larger (a zip bomb), is refused unread."""


def _limit(inputs: Sequence[InputSpec]) -> int:
    elements = sum(math.prod(i.shape) for i in inputs)
    return elements * MAX_SAMPLE_BYTES_PER_ELEMENT + 65536


def reason(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else repr(exc)


def _check_size(path: Path, inputs: Sequence[InputSpec]) -> None:
    """Refuses a sample file whose bytes (or, for .npz, inflated members) exceed what the inputs take."""
    import zipfile

    limit = _limit(inputs)
    try:
        size = path.stat().st_size
        if path.suffix.lower() == ".npz" and zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                size = max([size, *(info.file_size for info in zf.infolist())])
                for info in zf.infolist():
                    if info.file_size <= limit and info.filename.endswith(".npy"):
                        with zf.open(info) as member:
                            size = max(size, _declared_bytes(member))
        elif path.suffix.lower() == ".npy":
            with pathpolicy.open_regular(path) as fh:
                size = max(size, _declared_bytes(fh))
    except (OSError, ValueError, zipfile.BadZipFile) as exc:  # PathRefused is a ValueError
        raise TerminalError(f"{path.name}: cannot read ({reason(exc)})") from exc
    if size > limit:
        raise TerminalError(
            f"{path.name}: holds {size} bytes, more than the {limit} the model's inputs can take "
            "(a wrong file, or a zip bomb)"
        )


def _declared_bytes(fh: Any) -> int:
    """The bytes an .npy header says its array holds (read before any allocation; 0 if no header)."""
    import numpy as np

    fmt = np.lib.format
    try:
        version = fmt.read_magic(fh)
    except ValueError:
        return 0  # not an .npy: np.load reports it
    reader = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
    shape, _fortran, dtype = reader(fh, max_header_size=10_000)
    return int(math.prod(shape)) * dtype.itemsize


def _load_array_file(path: Path, inputs: Sequence[InputSpec]) -> Any:
    import zipfile

    import numpy as np

    _check_size(path, inputs)
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise TerminalError(f"{path.name}: cannot read ({reason(exc)})") from exc


def read_npy(path: Path, inputs: Sequence[InputSpec]) -> dict[str, np.ndarray]:
    if len(inputs) != 1:
        names = ", ".join(i.name for i in inputs)
        raise TerminalError(
            f"{path.name}: the model has {len(inputs)} inputs ({names}); use .npz keyed by input name"
        )
    spec = inputs[0]
    return {spec.name: coerce(_load_array_file(path, inputs), spec, path.name)}


def read_npz(path: Path, inputs: Sequence[InputSpec]) -> dict[str, np.ndarray]:
    with _load_array_file(path, inputs) as archive:
        keys = set(archive.files)
        wanted = {i.name for i in inputs}
        if keys != wanted:
            missing, extra = sorted(wanted - keys), sorted(keys - wanted)
            parts = [
                f"missing {', '.join(missing)}" if missing else "",
                f"unknown {', '.join(extra)}" if extra else "",
            ]
            raise TerminalError(
                f"{path.name}: arrays must be keyed by the model's input names ({'; '.join(p for p in parts if p)})"
            )
        try:
            arrays = {spec.name: archive[spec.name] for spec in inputs}
        except (OSError, ValueError, EOFError, KeyError) as exc:  # pickled object arrays, corrupt members
            raise TerminalError(f"{path.name}: cannot read ({reason(exc)})") from exc
        return {spec.name: coerce(arrays[spec.name], spec, path.name) for spec in inputs}


def coerce(array: Any, spec: InputSpec, source: str) -> np.ndarray:
    """`array` in the input's dtype and shape; a missing leading batch dim of 1 is added.

    Casting is allowed within a kind (float64 -> float32) and between integer types when every
    value fits; anything lossy is an error rather than a silent wrap-around.
    """
    import numpy as np

    arr = np.asarray(array)
    if tuple(arr.shape) != spec.shape:
        if arr.ndim + 1 == len(spec.shape) and spec.shape[0] == 1 and tuple(arr.shape) == spec.shape[1:]:
            arr = arr[np.newaxis]
        else:
            raise TerminalError(
                f"{source}: array for input {spec.name} has shape {list(arr.shape)}, the model takes {list(spec.shape)}"
            )
    target = np.dtype(spec.dtype)
    if arr.dtype != target:
        if not _castable(arr, target):
            raise TerminalError(
                f"{source}: {arr.dtype} data cannot feed input {spec.name} ({target}) without loss"
            )
        arr = arr.astype(target)
    if np.issubdtype(arr.dtype, np.inexact):
        _require_finite(arr, spec, source)
    return np.require(arr, requirements="C")  # ascontiguousarray would make a scalar [1]


def _require_finite(arr: np.ndarray, spec: InputSpec, source: str) -> None:
    """A NaN or an infinity in a sample is the data's fault, named here: fed on, it would surface as a
    compiler or accuracy failure that names neither the file nor the value."""
    import numpy as np

    bad = ~np.isfinite(arr)
    if not bad.any():
        return
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    raise TerminalError(
        f"{source}: array for input {spec.name} holds {int(bad.sum())} non-finite value(s) "
        f"(first {arr[first]} at index {list(first)}): samples must be finite numbers"
    )


def _castable(arr: np.ndarray, target: np.dtype[Any]) -> bool:
    import numpy as np

    if np.can_cast(arr.dtype, target, casting="same_kind"):
        return True
    both_int = np.issubdtype(arr.dtype, np.integer) and np.issubdtype(target, np.integer)
    if both_int and arr.size:
        info = np.iinfo(target)
        return bool(arr.min() >= info.min and arr.max() <= info.max)
    return both_int


def _image_geometry(spec: InputSpec) -> tuple[str, int, int, int] | None:
    """(layout, height, width, channels) of an input that takes one raw frame, else None."""
    shape = spec.shape
    if len(shape) == 4 and shape[0] == 1:
        if shape[3] in (1, 3):
            return "nhwc", shape[1], shape[2], shape[3]
        if shape[1] in (1, 3):
            return "nchw", shape[2], shape[3], shape[1]
    if len(shape) == 3 and shape[0] == 1:
        return "nhw", shape[1], shape[2], 1
    return None


def read_image(path: Path, inputs: Sequence[InputSpec], color: Color | None) -> dict[str, np.ndarray]:
    import numpy as np

    if len(inputs) != 1:
        raise TerminalError(
            f"{path.name}: images feed single-input models only; this model has {len(inputs)} inputs"
        )
    spec = inputs[0]
    if spec.dtype != "uint8":
        raise TerminalError(
            f"{path.name}: images are fed raw (uint8), but model input {spec.name} is {spec.dtype}: fold the "
            "preprocessing into the model (spec.preprocess) or give .npy/.npz samples"
        )
    geometry = _image_geometry(spec)
    if geometry is None:
        raise TerminalError(
            f"{path.name}: model input {spec.name} {list(spec.shape)} does not take one frame "
            "([1,H,W,C], [1,C,H,W] or [1,H,W] with C 1 or 3)"
        )
    layout, height, width, channels = geometry
    pixels = _decode(path, channels, (width, height), spec.name)
    if channels == 3 and (color or spec.color or "rgb") == "bgr":
        pixels = pixels[..., ::-1]
    if layout == "nchw":
        pixels = pixels.transpose(2, 0, 1)
    elif layout == "nhw":
        pixels = pixels[..., 0]
    return {spec.name: np.ascontiguousarray(pixels[np.newaxis])}


SIXTEEN_BIT_MODES = ("I;16", "I;16B", "I;16L", "I;16N")
"""Pillow's modes of 16-bit grayscale pixels (a 16-bit PNG)."""


def _eight_bit(image: Any, channels: int) -> np.ndarray:
    """The image's pixels at 8 bits, `channels` of them: 16-bit grayscale scaled (v * 255 / 65535,
    rounded: never clipped to 0/255; a 16-bit PNG, which older Pillow opens as mode I), palette, CMYK
    and the other colour modes converted to RGB or L the way Pillow defines (alpha dropped; 16-bit
    colour PNGs Pillow itself reads at 8 bits)."""
    import numpy as np

    if image.mode in SIXTEEN_BIT_MODES or (image.mode == "I" and image.format == "PNG"):
        wide = np.asarray(image, dtype=np.uint32)
        gray = ((wide * 255 + 32767) // 65535).astype(np.uint8)
        return np.repeat(gray[..., np.newaxis], channels, axis=2)
    return np.asarray(image.convert("RGB" if channels == 3 else "L"), dtype=np.uint8)


def _decode(path: Path, channels: int, size: tuple[int, int], name: str) -> np.ndarray:
    """HxWxC uint8 pixels (RGB for 3 channels) of a WxH image. The size is checked from the header,
    before any pixel is decoded: a decompression bomb is refused without being inflated."""
    import numpy as np
    from PIL import Image, UnidentifiedImageError

    try:
        with pathpolicy.open_regular(path) as fh, Image.open(fh) as image:
            if image.size != size:
                raise TerminalError(
                    f"{path.name} is {image.size[0]}x{image.size[1]}, model input {name} takes "
                    f"{size[0]}x{size[1]} frames (the folded preprocessing resizes only from the size it "
                    "was built for)"
                )
            pixels = _eight_bit(image, channels)
    except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TerminalError(f"{path.name}: cannot decode image ({reason})") from exc
    return pixels if pixels.ndim == 3 else pixels[..., np.newaxis]
