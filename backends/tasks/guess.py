"""The most likely task of a model, from its outputs' shapes and the op that produces each: what
`npuctl init` writes, commented, for the user to confirm. A guess, never applied silently."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Dims = tuple[int | None, ...]

_MIN_ANCHORS = 100
"""A detection head has at least this many anchor rows (YOLO at 320x320 has 2100)."""
_MAX_ATTRIBUTES = 300
"""... and at most this many attributes per row (4 box + objectness + classes)."""


@dataclass(frozen=True)
class Guess:
    task: dict[str, Any]
    why: str


def _dims(value: Any) -> Dims:
    return tuple(
        d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
        for d in value.type.tensor_type.shape.dim
    )


def _text(dims: Dims) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def guess(model: Path, inputs: Mapping[str, Sequence[int | None]] | None = None) -> Guess:
    """The likely task of `model` at the input shapes the user gave (`inputs`: name -> dims, None for
    a dim still open) or, without them, the model's declared ones. Outputs whose declared shape is not
    fully known are measured with one run at those shapes: a head's layout depends on its size (a
    YOLOv8 head at 64x64 has fewer anchors than attributes)."""
    import onnx

    proto = onnx.load(str(model), load_external_data=False)
    outputs = [(o.name, _dims(o)) for o in proto.graph.output]
    note = ""
    probe: Probe | None = None
    if inputs or any(not dims or None in dims[1:] for _, dims in outputs):
        probe = _run_once(model, dict(inputs or {}))
        if probe is not None and probe.shapes != outputs:
            at = "the spec's" if inputs else "the declared"
            outputs, note = probe.shapes, f" (shapes from one run on zeros at {at} input shapes)"
    found = (
        _binary(outputs, proto)
        or _tagger(outputs, proto, model, inputs)
        or _gfl(outputs, proto)
        or _maps(outputs, proto, _input_hw(proto, inputs))
        or _decoder_step(outputs, proto, inputs)
        or _from_shapes(outputs, proto, _input_hw(proto, inputs))
    )
    if found.task.get("type") == "ctc":
        found = _ctc_blank(found, outputs, probe or _run_once(model, dict(inputs or {})))
    return Guess(found.task, found.why + note)


@dataclass(frozen=True)
class Probe:
    """One run on zeros: each output's shape, and the class (last axis) that wins most positions."""

    shapes: list[tuple[str, Dims]]
    winners: dict[str, tuple[int, int, int]]
    """output -> (class, positions it wins, positions)."""


def _ctc_blank(found: Guess, outputs: list[tuple[str, Dims]], probe: Probe | None) -> Guess:
    """The blank of a CTC head: on an empty input a CTC model emits the blank at (nearly) every step,
    and exporters put it first or last. The class that wins most steps of the run on zeros, when it
    is the first or the last, is taken. A class between them winning most steps is no blank: the
    head is a frame tagger's (an EEG net's seizure states), and the guess leaves the generic measure
    rather than decode CTC strings from it. Without a dominant class, class 0, the common convention,
    stays (and says so)."""
    name, dims = outputs[0]
    won = (probe.winners if probe else {}).get(name)
    classes = dims[-1] or 0
    if won is None or classes < 2:
        return found
    top, wins, steps = won
    if top in (0, classes - 1) and 2 * wins > steps:
        why = f"{found.why}; blank {top}: it wins {wins} of {steps} steps on an empty (all-zero) input"
        return Guess({**found.task, "blank": top}, why)
    if 2 * wins > steps:
        why = (
            f"{found.why}, but not CTC: on an empty (all-zero) input class {top} of {classes} wins {wins} of "
            f"{steps} steps, where a CTC model emits its blank, first or last; per-step classes of a "
            "signal (a frame tagger), which no task here decodes"
        )
        return Guess({"type": "regression"}, f"{why}; the generic measure compares the scores")
    why = f"{found.why}; blank 0 by convention (on zeros class {top} wins {wins} of {steps} steps)"
    return Guess(found.task, why)


def _input_hw(proto: Any, inputs: Mapping[str, Sequence[int | None]] | None) -> tuple[int, int] | None:
    """The first image input's height and width at the shapes the guess ran at."""
    from backends.tasks.config import image_hw

    inits = {t.name for t in proto.graph.initializer}
    for value in proto.graph.input:
        if value.name in inits:
            continue
        given = (inputs or {}).get(value.name)
        dims = list(given) if given else [d or 0 for d in _dims(value)]
        return image_hw([int(d or 0) for d in dims])
    return None


def _run_once(model: Path, inputs: dict[str, Sequence[int | None]]) -> Probe | None:
    """One run on zeros at `inputs`, in a child process (a model that crashes ONNX Runtime must not
    take `npuctl init` down): None when it cannot run."""
    import tempfile

    from backends.sdk.child_call import Child, Unloadable
    from backends.sdk.errors import BackendError

    child = Child()
    shapes = {name: [d if d else 0 for d in dims] for name, dims in inputs.items()}
    try:
        with tempfile.TemporaryDirectory(prefix="npuctl-guess-") as tmp:
            found = child.call(
                "backends.tasks.guess:output_shapes",
                {"model": str(model), "shapes": shapes},
                Path(tmp) / "run.log",
                "onnxruntime",
            )
    except (BackendError, Unloadable):
        return None
    finally:
        child.close()
    if found is None:
        return None
    return Probe(
        [(str(name), tuple(dims)) for name, dims, _ in found],
        {str(name): (int(w[0]), int(w[1]), int(w[2])) for name, _, w in found if w is not None},
    )


def output_shapes(request: dict[str, Any]) -> list[tuple[str, Dims, tuple[int, int, int] | None]] | None:
    """(the child's side) each output's shape after one run on zeros of `request["model"]` at
    `request["shapes"]` (name -> dims, 0: an open dim), open dims at 1 (the batch, first) or 64, and
    for a float output of rank 3, the class of its last axis that wins most positions: (class, wins,
    positions)."""
    model, shapes = str(request["model"]), dict(request.get("shapes") or {})
    try:
        import numpy as np
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 4
        session = ort.InferenceSession(
            _redeclared(model, shapes), options, providers=["CPUExecutionProvider"]
        )
        feed = {}
        for value in session.get_inputs():
            shape = feed_shape(value.shape, shapes.get(value.name))
            feed[value.name] = np.zeros(shape, numpy_type(value.type))
        names = [o.name for o in session.get_outputs()]
        return [
            (n, tuple(int(d) for d in np.shape(v)), _winner(np.asarray(v)))
            for n, v in zip(names, session.run(None, feed), strict=True)
        ]
    except Exception:  # onnxruntime raises its own types; a guess falls back to the declared shapes
        return None


def _redeclared(model: str, shapes: dict[str, list[int]]) -> Any:
    """The model to run: its path, or where the given shapes re-declare dims the model fixes (as the
    import stage does), its bytes with those inputs re-declared and its stale inner shapes dropped."""
    import onnx

    from backends.passes.shape_fix import is_fixed

    proto = onnx.load(model, load_external_data=False)
    moved = False
    for value in proto.graph.input:
        given = shapes.get(value.name)
        dims = value.type.tensor_type.shape.dim
        if (
            given
            and len(given) == len(dims)
            and any(is_fixed(d) and g and d.dim_value != g for d, g in zip(dims, given, strict=True))
        ):
            for d, g in zip(dims, given, strict=True):
                if g:
                    d.Clear()
                    d.dim_value = g
            moved = True
    if not moved:
        return model
    del proto.graph.value_info[:]
    for out in proto.graph.output:
        out.type.tensor_type.ClearField("shape")
    return proto.SerializeToString()


def _winner(value: Any) -> tuple[int, int, int] | None:
    import numpy as np

    if value.ndim != 3 or value.shape[-1] < 2 or not np.issubdtype(value.dtype, np.floating):
        return None
    counts = np.bincount(value.reshape(-1, value.shape[-1]).argmax(-1), minlength=value.shape[-1])
    top = int(counts.argmax())
    return top, int(counts[top]), int(counts.sum())


def feed_shape(declared: Sequence[Any], given: Sequence[int] | None) -> list[int]:
    """A run's input shape: the given dims, else the declared ones, open ones at 1 (the batch) or 64."""
    given = list(given or [0] * len(declared))
    return [
        g if g > 0 else d if isinstance(d, int) and d > 0 else (1 if k == 0 else 64)
        for k, (d, g) in enumerate(zip(declared, given, strict=False))
    ]


def numpy_type(ort_type: str) -> Any:
    """The numpy dtype of an ONNX Runtime input type string ("tensor(bool)"): float32 when unknown."""
    import numpy as np

    name = ort_type.removeprefix("tensor(").removesuffix(")")
    known = {"float": np.float32, "double": np.float64, "float16": np.float16, "bool": np.bool_}
    if name in known:
        return known[name]
    try:
        return np.dtype(name).type
    except TypeError:
        return np.float32


def _tagger(outputs: list[tuple[str, Dims]], proto: Any, model: Path, inputs: Any) -> Guess | None:
    from backends.tasks.guess_tokens import tagger

    found = tagger(outputs, proto, model, inputs)
    return None if found is None else Guess(*found)


def _from_shapes(outputs: list[tuple[str, Dims]], proto: Any, input_hw: tuple[int, int] | None) -> Guess:
    ssd = _ssd(outputs)
    if ssd is not None:
        return ssd
    from backends.tasks.config import SQUASHING, scores_output, tail_ops

    name, dims = outputs[0]
    shown = f"output {name} {_text(dims)}"
    producer = {out: n.op_type for n in proto.graph.node for out in n.output}
    op = producer.get(name, "")
    rank = len(dims)
    tokens = _token_inputs(proto)
    if rank == 4 and dims[1] == 1:
        if tail_ops(proto.graph, name) & SQUASHING:
            return Guess(
                {"type": "dense"}, f"{shown} is a single-channel probability map (a Sigmoid at its end)"
            )
        why = (
            f"{shown} is a single-channel map of unbounded values (no Sigmoid or Softmax after its last "
            "layer: depth, density or an image, not a mask to threshold)"
        )
        return Guess({"type": "regression"}, f"{why}; the generic measure compares the values")
    if rank == 3 and sum(len(d) == 3 for _, d in outputs) > 1:
        why = (
            f"{len(outputs)} outputs of the same rank ({', '.join(_text(d) for _, d in outputs)}): a YOLO head "
            "is one [1, 4+C, N] or [1, N, 5+C] output, and these form no SSD or GFL head"
        )
        return Guess({"type": "regression"}, f"{why}; the generic measure compares each output")
    if rank == 3:
        found = _three(dims, shown, op, tokens, input_hw, scores_output(proto.graph, name))
        if found is not None:
            return found
        if tokens:
            why = (
                f"{shown} holds per-token scores of a model reading integer token ids: no task measures them"
            )
            return Guess({"type": "regression"}, f"{why}; the generic measure compares them as numbers")
    rest = [d for d in dims[1:] if d != 1]  # the first axis is the batch, fixed or not
    if rank >= 2 and len(rest) == 1 and rest[0] is not None and rest[0] > 1:
        squashed = [o for o, _ in outputs if tail_ops(proto.graph, o) & SQUASHING]
        if len(outputs) > 1 and squashed and name not in squashed:
            why = (
                f"{len(outputs)} outputs: {shown} ends in no Softmax/Sigmoid while {squashed[0]} does; "
                "a set of per-sample results (boxes, points, scores) no single task covers"
            )
            return Guess({"type": "regression"}, f"{why}; the generic measure compares each output")
        return Guess({"type": "classification"}, f"{shown} is one score vector per sample")
    return Guess({"type": "regression"}, f"{shown} has no class, box, sequence or map layout")


def _decoder_step(
    outputs: list[tuple[str, Dims]], proto: Any, inputs: Mapping[str, Sequence[int | None]] | None
) -> Guess | None:
    """One step of a recurrent decoder: the first output one vector per sample normalised over its
    classes (a Softmax or LogSoftmax after its last layer: the next token's scores) and every other output shaped like one
    of the inputs at the spec's shapes (the state it hands to the next step: `hidden` in, `hidden_out`
    out; a dim the input leaves open matches any). The scores are the application's result; the
    state is carried, not scored."""
    from backends.tasks.config import last_layer

    name, dims = outputs[0]
    vector = [d for d in dims[1:] if d != 1]  # one score per class beside the batch: [N, C]
    if len(outputs) < 2 or len(vector) != 1 or last_layer(proto.graph, name) not in ("Softmax", "LogSoftmax"):
        return None
    inits = {t.name for t in proto.graph.initializer}
    given = dict(inputs or {})
    declared = [
        (value.name, list(given.get(value.name) or _dims(value)))
        for value in proto.graph.input
        if value.name not in inits
    ]

    def carried(out: Dims) -> str | None:
        for input_name, shape in declared:
            if len(shape) == len(out) and all(a is None or a == b for a, b in zip(shape, out, strict=True)):
                return input_name
        return None

    states = [(o, carried(d)) for o, d in outputs[1:]]
    if any(source is None for _, source in states):
        return None
    listed = ", ".join(f"{o} (shaped like input {source})" for o, source in states)
    why = (
        f"output {name} {_text(dims)} is one score vector per sample (a {last_layer(proto.graph, name)} "
        f"over its classes), and {listed} the state one decoding step hands to the next, not scored"
    )
    return Guess({"type": "classification", "output": name}, why)


def _token_inputs(proto: Any) -> bool:
    """True when the model reads integer ids ([N, T] int32/int64 inputs): text, not an image or sound."""
    import onnx

    inits = {t.name for t in proto.graph.initializer}
    ints = {onnx.TensorProto.INT32, onnx.TensorProto.INT64}
    for value in proto.graph.input:
        tensor = value.type.tensor_type
        if value.name not in inits and tensor.elem_type in ints and len(tensor.shape.dim) == 2:
            return True
    return False


def _binary(outputs: list[tuple[str, Dims]], proto: Any) -> Guess | None:
    """One probability per sample ([N, 1], a Sigmoid at its end, maybe inside an If): a yes/no decision."""
    from backends.tasks.config import SQUASHING, tail_ops

    name, dims = outputs[0]
    if not dims or any(d != 1 for d in dims[1:]) or not (tail_ops(proto.graph, name) & SQUASHING):
        return None
    why = f"output {name} {_text(dims)} is one probability per sample: a yes/no decision at 0.5"
    return Guess({"type": "classification"}, why)


def _maps(outputs: list[tuple[str, Dims]], proto: Any, input_hw: tuple[int, int] | None) -> Guess | None:
    """Outputs that are maps of one grid: a CenterNet-style head (a probability heatmap, then size and
    offset maps) or a per-cell grid head (a score map beside a 4-channel box map, whose stride and
    window size follow from the input and map sizes: map = (input - cell) / stride + 1)."""
    from backends.tasks import maps
    from backends.tasks.config import SQUASHING, tail_ops

    if any(d is None for _, dims in outputs for d in dims):
        return None
    shapes = [tuple(int(d or 0) for d in dims) for _, dims in outputs]
    head = maps.head_of(shapes)
    shown = ", ".join(f"{name} {_text(dims)}" for name, dims in outputs)
    if head == "centernet" and tail_ops(proto.graph, outputs[0][0]) & SQUASHING:
        why = f"outputs {shown} read as a heatmap, a size map and an offset map (CenterNet-style)"
        return Guess({"type": "detection", "head": "centernet"}, why)
    if head != "grid" or input_hw is None:
        return None
    axis = maps.channel_axis(shapes)
    map_h = shapes[0][2 if axis == 1 else 1]
    stride = max(1, round(input_hw[0] / map_h))
    cell = max(stride, input_hw[0] - (map_h - 1) * stride)
    why = (
        f"outputs {shown} read as a score map and a box map per cell (a grid head): {map_h} rows for "
        f"{input_hw[0]} input rows give stride {stride}, window {cell}"
    )
    return Guess({"type": "detection", "head": "grid", "stride": stride, "cell": cell}, why)


def _gfl(outputs: list[tuple[str, Dims]], proto: Any) -> Guess | None:
    """Pairs of [1, N, C] scores and [1, N, 4*(R+1)] distributions per level: a PicoDet/NanoDet head."""
    from backends.tasks import gfl
    from backends.tasks.config import graph_facts

    shapes = [tuple(0 if d is None else d for d in dims) for _, dims in outputs]
    if len(shapes) < 4 or not gfl.looks_like_gfl(shapes, graph_facts(proto).input_hw):
        return None
    levels = len(shapes) // 2
    why = f"{len(shapes)} outputs pair up as {levels} levels of class scores and box distributions (PicoDet/NanoDet)"
    return Guess({"type": "detection", "head": "gfl"}, why)


def _ssd(outputs: list[tuple[str, Dims]]) -> Guess | None:
    """Boxes [1, N, 4] beside scores [1, N, C]: rank 2 or 3, N > 1 rows of one anchor each."""
    for name, box in outputs:
        if len(box) in (2, 3) and box[-1] == 4 and (box[-2] or 0) > 1:
            for other, score in outputs:
                if other != name and len(score) == len(box) and score[-2] == box[-2]:
                    why = f"outputs {name} {_text(box)} (boxes) and {other} {_text(score)} (scores)"
                    return Guess({"type": "detection", "head": "ssd", "outputs": [name, other]}, why)
    return None


def _anchor_rows(rows: int, input_hw: tuple[int, int] | None) -> bool:
    """Whether `rows` can be the anchor points of a YOLO head on this input: one per cell of each level,
    over consecutive power-of-two strides (8, 16, 32 in YOLOv5/v8/X; 4 to 64 in their P2/P6 forms),
    with 1 to 3 anchors per cell. Without the input's size, any count from _MIN_ANCHORS passes."""
    if input_hw is None:
        return rows >= _MIN_ANCHORS
    h, w = input_hw
    cells = [-(-h // s) * -(-w // s) for s in (4, 8, 16, 32, 64, 128)]
    sums = {sum(cells[i:j]) for i in range(len(cells)) for j in range(i + 2, len(cells) + 1)}
    return any(rows == k * total for total in sums for k in (1, 2, 3))


def _three(
    dims: Dims, shown: str, op: str, tokens: bool, input_hw: tuple[int, int] | None, scores: bool
) -> Guess | None:
    a, b, c = dims
    if a == 1 and b is not None and c is not None:
        if _anchor_rows(c, input_hw) and b <= _MAX_ATTRIBUTES and b > 4 and op != "Softmax":
            return Guess({"type": "detection"}, f"{shown} is a YOLOv8-style head [1, 4+C, N]")
        if _anchor_rows(b, input_hw) and c <= _MAX_ATTRIBUTES and c > 5 and op != "Softmax":
            return Guess({"type": "detection"}, f"{shown} is a YOLOX/YOLOv5-style head [1, N, 5+C]")
    if tokens:
        return None  # per-token scores of a text model: CTC reads images or sound
    if c is not None and c > 2 and (b == 1 or a == 1 or a is None or b is None) and scores:
        layout = "[T, 1, C]" if b == 1 else "[1, T, C]"
        return Guess({"type": "ctc", "blank": 0}, f"{shown} reads as per-step class scores {layout}")
    return None


def yaml_line(found: Guess) -> str:
    """`task: {...}` as one YAML flow mapping."""
    parts = []
    for key, value in found.task.items():
        shown = "[" + ", ".join(str(v) for v in value) + "]" if isinstance(value, list) else str(value)
        parts.append(f"{key}: {shown}")
    return "task: {" + ", ".join(parts) + "}"
