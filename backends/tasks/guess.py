"""The most likely task of a model, from its outputs' shapes and the op that produces each: what
`npuctl init` writes, commented, for the user to confirm. A guess, never applied silently."""

from __future__ import annotations

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


def guess(model: Path) -> Guess:
    import onnx

    proto = onnx.load(str(model), load_external_data=False)
    outputs = [(o.name, _dims(o)) for o in proto.graph.output]
    producer = {out: n.op_type for n in proto.graph.node for out in n.output}
    found = _binary(outputs, proto) or _gfl(outputs, proto) or _from_shapes(outputs, producer)
    if found.task["type"] == "regression" and any(d is None for _, dims in outputs for d in dims[1:]):
        ran = _run_once(model)  # declared shapes are incomplete: the real ones decide
        if ran is not None:
            found = _from_shapes(ran, producer)
            found = Guess(
                found.task, f"{found.why} (shape from one run on zeros; the model declares another)"
            )
    return found


def _run_once(model: Path) -> list[tuple[str, Dims]] | None:
    """Output shapes of one run on zeros, in a child process (a model that crashes ONNX Runtime must not
    take `npuctl init` down): None when it cannot run."""
    import tempfile

    from backends.sdk.child_call import Child, Unloadable
    from backends.sdk.errors import BackendError

    child = Child()
    try:
        with tempfile.TemporaryDirectory(prefix="npuctl-guess-") as tmp:
            found = child.call(
                "backends.tasks.guess:output_shapes", str(model), Path(tmp) / "run.log", "onnxruntime"
            )
    except (BackendError, Unloadable):
        return None
    finally:
        child.close()
    if found is None:
        return None
    return [(str(name), tuple(dims)) for name, dims in found]


def output_shapes(model: str) -> list[tuple[str, Dims]] | None:
    """(the child's side) output shapes of one run on zeros, dynamic dims at 1 (first) or 64."""
    try:
        import numpy as np
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 4
        session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        feed = {}
        for value in session.get_inputs():
            shape = [
                d if isinstance(d, int) and d > 0 else (1 if k == 0 else 64)
                for k, d in enumerate(value.shape)
            ]
            dtype = np.float32 if "float" in value.type else np.int64
            feed[value.name] = np.zeros(shape, dtype)
        names = [o.name for o in session.get_outputs()]
        return [
            (n, tuple(int(d) for d in np.shape(v)))
            for n, v in zip(names, session.run(None, feed), strict=True)
        ]
    except Exception:  # onnxruntime raises its own types; a guess falls back to the declared shapes
        return None


def _from_shapes(outputs: list[tuple[str, Dims]], producer: dict[str, str]) -> Guess:
    ssd = _ssd(outputs)
    if ssd is not None:
        return ssd
    name, dims = outputs[0]
    shown = f"output {name} {_text(dims)}"
    op = producer.get(name, "")
    rank = len(dims)
    if rank == 4 and dims[1] == 1:
        return Guess({"type": "dense"}, f"{shown} is a single-channel map")
    if rank == 3:
        found = _three(dims, shown, op)
        if found is not None:
            return found
    rest = [d for d in dims[1:] if d != 1]  # the first axis is the batch, fixed or not
    if rank >= 2 and len(rest) == 1 and rest[0] is not None and rest[0] > 1:
        return Guess({"type": "classification"}, f"{shown} is one score vector per sample")
    return Guess({"type": "regression"}, f"{shown} has no class, box, sequence or map layout")


def _binary(outputs: list[tuple[str, Dims]], proto: Any) -> Guess | None:
    """One probability per sample ([N, 1], a Sigmoid at its end, maybe inside an If): a yes/no decision."""
    from backends.tasks.config import SQUASHING, tail_ops

    name, dims = outputs[0]
    if not dims or any(d != 1 for d in dims[1:]) or not (tail_ops(proto.graph, name) & SQUASHING):
        return None
    why = f"output {name} {_text(dims)} is one probability per sample: a yes/no decision at 0.5"
    return Guess({"type": "classification"}, why)


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
    for name, box in outputs:
        if len(box) >= 2 and box[-1] == 4:
            for other, score in outputs:
                if other != name and len(score) == len(box) and score[-2] == box[-2]:
                    why = f"outputs {name} {_text(box)} (boxes) and {other} {_text(score)} (scores)"
                    return Guess({"type": "detection", "head": "ssd", "outputs": [name, other]}, why)
    return None


def _three(dims: Dims, shown: str, op: str) -> Guess | None:
    a, b, c = dims
    if a == 1 and b is not None and c is not None:
        if c >= _MIN_ANCHORS and b <= _MAX_ATTRIBUTES and b > 4:
            return Guess({"type": "detection"}, f"{shown} is a YOLOv8-style head [1, 4+C, N]")
        if b >= _MIN_ANCHORS and c <= _MAX_ATTRIBUTES and c > 5 and op != "Softmax":
            return Guess({"type": "detection"}, f"{shown} is a YOLOX/YOLOv5-style head [1, N, 5+C]")
    if c is not None and c > 2 and (b == 1 or a == 1 or a is None or b is None):
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
