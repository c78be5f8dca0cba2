"""The one sample reader: calibration (quantize) and evaluation (evaluate) read data the same way.

A folder holds `.npy` (single-input models), `.npz` (one array per input name) or images (`.png`,
`.jpg`, `.jpeg`, `.bmp`), read in sorted file-name order. A requested count is honoured exactly: a
folder with fewer samples is an error, never a silent subset (Olive once calibrated on 30 of 128
samples without saying so); with more, `seed` picks a subset by hashing file names, which depends on
nothing but the names, so the same folder gives the same selection on every machine and numpy version.

Images are fed raw: only to a uint8 input whose preprocessing (resize included) is folded into the
model, at exactly the input's height and width. Anything else is a TerminalError naming the file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from backends.passes import sample_formats
from backends.sdk import pathpolicy
from backends.sdk.errors import TerminalError

if TYPE_CHECKING:
    import numpy as np
    import onnx

ARRAY_SUFFIXES = (".npy", ".npz")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
SAMPLE_SUFFIXES = ARRAY_SUFFIXES + IMAGE_SUFFIXES

Color = Literal["rgb", "bgr"]

COLOR_METADATA = "npuctl.color."
"""Model metadata_props key prefix: `npuctl.color.<input>` = "rgb" | "bgr" names the channel order a
folded-preprocessing input expects its frames in (written by the preprocess stage); images are decoded
to that order. Absent: RGB."""


@dataclass(frozen=True)
class InputSpec:
    """One model input: name, static shape and numpy dtype name ("float32", "uint8", ...)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    color: Color | None = None
    """Channel order 3-channel images are fed in, from the model's `npuctl.color.<input>` metadata."""
    index_bound: int | None = None
    """An integer input the graph reads as Gather indices (token ids into an embedding): valid values
    are [0, index_bound), the smallest gathered axis. None: no such use is known."""
    padding_mask: bool = False
    """A [N, T] boolean (or integer, not gathered) input beside token ids of the same shape: a padding
    mask, whose random values are a run of 1 then a run of 0 per row (padding_masks)."""


@dataclass(frozen=True)
class Sample:
    """One model feed; `name` is the file name (the key of the labels file) or "random-0003"."""

    name: str
    feed: dict[str, np.ndarray]


def model_inputs(model: Path | onnx.ModelProto) -> list[InputSpec]:
    """The graph inputs (initializers excluded) of an ONNX model with static shapes."""
    import onnx

    from backends.passes.facts import load_light

    proto = load_light(model) if isinstance(model, Path) else model  # never the weights' bytes
    weights = {init.name for init in proto.graph.initializer}
    colors = {
        p.key[len(COLOR_METADATA) :]: p.value
        for p in proto.metadata_props
        if p.key.startswith(COLOR_METADATA)
    }
    bounds = index_bounds(proto)
    masks = padding_masks(proto, bounds)
    specs = []
    for value in proto.graph.input:
        if value.name in weights:
            continue
        tensor_type = value.type.tensor_type
        dims = [
            d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
            for d in tensor_type.shape.dim
        ]
        if None in dims or not tensor_type.HasField("shape"):
            raise TerminalError(
                f"model input {value.name!r} has dynamic dimensions {dims}: import fixes them first"
            )
        dtype = str(onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        shape = tuple(int(d) for d in dims if d is not None)
        color = _color(colors.get(value.name), value.name)
        specs.append(InputSpec(value.name, shape, dtype, color, bounds.get(value.name), value.name in masks))
    return specs


def padding_masks(proto: onnx.ModelProto, bounds: Mapping[str, int]) -> set[str]:
    """Inputs read as padding masks: rank 2, boolean or an integer the graph does not gather, with the
    dims of an input of token ids (one `index_bounds` found)."""
    import onnx

    ints = {onnx.TensorProto.INT32, onnx.TensorProto.INT64}
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in proto.graph.input}
    ids = [dims[n] for n in bounds if n in dims and len(dims[n]) == 2]
    found = set()
    for value in proto.graph.input:
        kind = value.type.tensor_type.elem_type
        is_mask_type = kind == onnx.TensorProto.BOOL or (kind in ints and value.name not in bounds)
        if is_mask_type and dims[value.name] in ids:
            found.add(value.name)
    return found


_PASS_THROUGH = frozenset({"Cast", "Reshape", "Unsqueeze", "Squeeze", "Identity", "Flatten", "Expand"})
"""Ops that carry an integer tensor's values unchanged (only its shape or type moves)."""


def index_bounds(proto: onnx.ModelProto) -> dict[str, int]:
    """Integer graph input -> the smallest axis size of the weights it indexes through Gather (through
    ops that keep its values): ids at or past it are out of range for the model, so random data must
    stay below it."""
    sizes = {t.name: list(t.dims) for t in proto.graph.initializer}
    consumers: dict[str, list[Any]] = {}
    for node in proto.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    out: dict[str, int] = {}
    for value in proto.graph.input:
        frontier, seen = [value.name], set()
        while frontier:
            tensor = frontier.pop()
            for node in consumers.get(tensor, []):
                if id(node) in seen:
                    continue
                seen.add(id(node))
                if node.op_type in _PASS_THROUGH and node.input[0] == tensor:
                    frontier.extend(node.output)
                elif node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == tensor:
                    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                    dims = sizes.get(node.input[0])
                    if dims and -len(dims) <= axis < len(dims):
                        out[value.name] = min(out.get(value.name, dims[axis]), dims[axis])
    return out


def _color(value: str | None, name: str) -> Color | None:
    if value is None:
        return None
    if value == "rgb":
        return "rgb"
    if value == "bgr":
        return "bgr"
    raise TerminalError(f"model metadata {COLOR_METADATA}{name} is {value!r}, expected rgb or bgr")


def sample_files(folder: Path) -> list[Path]:
    """Sample files directly in `folder` (not recursive, hidden files skipped), sorted by file name."""
    if not folder.is_dir():
        raise TerminalError(f"data folder {folder} does not exist or is not a folder")
    try:  # the engine confined every member to the repository when it hashed the folder
        return pathpolicy.members(folder, None, SAMPLE_SUFFIXES)
    except pathpolicy.PathRefused as exc:
        raise TerminalError(str(exc)) from None


def no_samples(folder: Path) -> str:
    """Why `folder` gives no samples: samples are read from the folder itself, never from its
    subfolders, so a folder of class subfolders (ImageNet's layout) names them and says so."""
    said = f"{folder} holds no samples ({', '.join(SAMPLE_SUFFIXES)}) directly"
    try:
        subfolders = sorted(e.name for e in os.scandir(folder) if e.is_dir() and not e.name.startswith("."))
    except OSError:
        return said
    if not subfolders:
        return said
    shown = ", ".join(subfolders[:3]) + (f" and {len(subfolders) - 3} more" if len(subfolders) > 3 else "")
    return (
        f"{said}: its {len(subfolders)} subfolder(s) ({shown}) are not searched; put the samples in "
        "the folder itself or name a subfolder"
    )


def select_files(folder: Path, count: int | None = None, seed: int = 0, role: str = "data") -> list[Path]:
    """Exactly `count` sample files (all when None), in sorted file-name order.

    With more files than asked, the subset is the `count` smallest sha256("<seed>:<file name>"):
    deterministic, and adding one file changes the selection by at most one file.
    """
    files = sample_files(folder)
    if not files:
        raise TerminalError(f"{role} folder {no_samples(folder)}")
    if count is None:
        return files
    if count <= 0:
        raise TerminalError(f"{role}: sample count must be > 0, got {count}")
    if len(files) < count:
        raise TerminalError(f"{role} folder {folder} has {len(files)} samples, spec asks for {count}")
    if len(files) == count:
        return files

    def rank(path: Path) -> str:
        return hashlib.sha256(f"{seed}:{path.name}".encode()).hexdigest()

    chosen = {p.name for p in sorted(files, key=rank)[:count]}
    return [p for p in files if p.name in chosen]


@dataclass(frozen=True)
class SampleSet:
    """Samples read from their files on every pass, never all held at once: calibration and evaluation
    sets may be larger than memory. Iterating twice decodes twice (cheap next to running a model)."""

    files: tuple[Path, ...]
    inputs: tuple[InputSpec, ...]
    color: Color | None = None
    role: str = "data"
    """The spec field the samples come from; it prefixes a bad file's error."""

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.files]

    def __len__(self) -> int:
        return len(self.files)

    def __iter__(self) -> Iterator[Sample]:
        for path in self.files:
            try:
                yield read_sample(path, self.inputs, self.color)
            except TerminalError as exc:
                raise TerminalError(f"{self.role}: {exc}") from None


def sample_set(
    folder: Path,
    inputs: Sequence[InputSpec],
    count: int | None = None,
    seed: int = 0,
    role: str = "data",
    color: Color | None = None,
) -> SampleSet:
    """The selected samples of `folder` (select_files), read lazily."""
    return SampleSet(tuple(select_files(folder, count, seed, role)), tuple(inputs), color, role)


def iter_samples(
    folder: Path,
    inputs: Sequence[InputSpec],
    count: int | None = None,
    seed: int = 0,
    role: str = "data",
    color: Color | None = None,
) -> Iterator[Sample]:
    """One lazy pass over the selected samples."""
    return iter(sample_set(folder, inputs, count, seed, role, color))


def load_samples(
    folder: Path,
    inputs: Sequence[InputSpec],
    count: int | None = None,
    seed: int = 0,
    role: str = "data",
    color: Color | None = None,
) -> list[Sample]:
    """All selected samples in memory."""
    return list(sample_set(folder, inputs, count, seed, role, color))


def read_sample(path: Path, inputs: Sequence[InputSpec], color: Color | None = None) -> Sample:
    """One file as a feed, coerced to the inputs' shapes and dtypes. `color` is the channel order
    3-channel images are fed in (the order the folded preprocessing expects); None: the input's own
    `color` (model metadata), else RGB."""
    suffix = path.suffix.lower()
    if suffix == ".npy":
        feed = sample_formats.read_npy(path, inputs)
    elif suffix == ".npz":
        feed = sample_formats.read_npz(path, inputs)
    elif suffix in IMAGE_SUFFIXES:
        feed = sample_formats.read_image(path, inputs, color)
    else:
        raise TerminalError(f"{path.name}: unsupported sample file type (use {', '.join(SAMPLE_SUFFIXES)})")
    return Sample(path.name, feed)


def random_samples(inputs: Sequence[InputSpec], count: int, seed: int = 0) -> list[Sample]:
    """`count` feeds of random values from a fixed seed, one generator per sample index, so sample i
    is the same whatever the count. Floats: standard normal; integers: [0, 100) or the type's range, and
    below the embedding size of an input read as Gather indices (InputSpec.index_bound)."""
    return [Sample(f"random-{index:04d}", random_feed(inputs, seed, index)) for index in range(count)]


def random_feed(inputs: Sequence[InputSpec], seed: int = 0, index: int = 0) -> dict[str, np.ndarray]:
    import numpy as np

    rng = np.random.default_rng([seed, index])
    feed: dict[str, np.ndarray] = {}
    for spec in inputs:
        dtype = np.dtype(spec.dtype)
        if spec.padding_mask:
            feed[spec.name] = padded_mask(rng, spec.shape).astype(dtype)
        elif np.issubdtype(dtype, np.floating):
            feed[spec.name] = rng.standard_normal(spec.shape).astype(dtype)
        elif dtype == np.bool_:
            feed[spec.name] = rng.integers(0, 2, spec.shape).astype(np.bool_)
        elif np.issubdtype(dtype, np.integer):
            high = min(int(np.iinfo(dtype).max) + 1, 256 if dtype.itemsize == 1 else 100)
            high = min(high, spec.index_bound) if spec.index_bound else high
            feed[spec.name] = rng.integers(0, high, spec.shape).astype(dtype)
        else:
            raise TerminalError(f"cannot make random data for input {spec.name} of type {spec.dtype}")
    return feed


def padded_mask(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    """Per row of [N, T], ones over a random length in [1, T - 1] then zeros: a padded sequence read
    either way (1 = token: right padding; 1 = padding: left padding), never one that pads every position
    (that makes a transformer's attention NaN) nor one that pads none."""
    import numpy as np

    rows, length = int(np.prod(shape[:-1])), int(shape[-1])
    kept = rng.integers(1, max(2, length), rows)
    mask = np.arange(length)[None, :] < kept[:, None]
    return mask.reshape(tuple(shape))


def read_labels(path: Path) -> dict[str, int]:
    """`<file name> <int label>` per line; blank lines and lines starting with # are skipped."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TerminalError(
            f"evaluate.labels: cannot read {path.name}: {sample_formats.reason(exc)}"
        ) from exc
    labels: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.rsplit(maxsplit=1)
        if len(parts) != 2 or not _is_int(parts[1]):
            raise TerminalError(
                f"evaluate.labels: {path.name}:{number}: expected '<file name> <integer label>', got {line!r}"
            )
        name = parts[0].strip()
        if name in labels:
            raise TerminalError(f"evaluate.labels: {path.name}:{number}: {name} is labelled twice")
        labels[name] = int(parts[1])
    if not labels:
        raise TerminalError(f"evaluate.labels: {path.name} has no labels")
    return labels


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


_Label = TypeVar("_Label")
"""A label of any task: a class index, a text line, a list of boxes (backends.tasks.labels)."""


def labels_for(
    names: Sequence[str], labels: Mapping[str, _Label], source: str = "labels file"
) -> list[_Label]:
    """The label of every sample (by file name), in order; a sample without a label is an error."""
    missing = [name for name in names if name not in labels]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise TerminalError(f"{source} has no label for {len(missing)} samples: {shown}")
    return [labels[name] for name in names]


class FeedReader:
    """ONNX Runtime's CalibrationDataReader protocol (get_next / rewind) over any sample source.

    `source` is called again on rewind, so samples are re-read lazily instead of held in memory.
    """

    def __init__(self, source: Callable[[], Iterator[Sample]]) -> None:
        self._source = source
        self._iter = source()

    def get_next(self) -> dict[str, np.ndarray] | None:
        sample = next(self._iter, None)
        return None if sample is None else sample.feed

    def rewind(self) -> None:
        self._iter = self._source()

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        self.rewind()
        while (feed := self.get_next()) is not None:
            yield feed
