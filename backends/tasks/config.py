"""The task an evaluation measures, as the spec's `evaluate.task` declares it (parsed from the stage config).

The pydantic models in reconciler.spec validate the spec; this module reads the resulting JSON into
frozen dataclasses so that backends never import the engine. The dataclasses' defaults are the task
defaults: the spec models read theirs from here, so a spec and a backend reading a task section without
a field agree on its value. `resolve` then fills what the spec left
to the model (`head: auto`, whether a detector's boxes still need their grid decode) from the graph,
once, so the metrics themselves only ever see arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from backends.sdk.errors import TerminalError

if TYPE_CHECKING:
    import onnx

Head = Literal["auto", "yolov8", "yolox", "ssd", "gfl", "centernet", "grid"]
BoxFormat = Literal["auto", "cxcywh", "xyxy"]
ClassificationMetric = Literal["top1", "top5"]
DetectionMetric = Literal["f1", "map"]
CtcMetric = Literal["exact", "char_accuracy"]
TokensMetric = Literal["token_agreement", "sequence_match"]
PadValue = Literal[0, 1]


@dataclass(frozen=True)
class Classification:
    output: str | None = None
    metric: ClassificationMetric = "top1"
    implied: bool = False
    """True when no task was declared and integer labels implied classification."""
    threshold: float | None = None
    """Decision threshold of a single-score output; None: 0.5 for probabilities, 0 for logits."""
    logits: bool = False
    """True when no Sigmoid/Softmax makes the scores (`resolve` decides it from the graph)."""
    type: str = "classification"

    def decision_threshold(self) -> float:
        if self.threshold is not None:
            return self.threshold
        return 0.0 if self.logits else 0.5


@dataclass(frozen=True)
class Detection:
    head: Head = "auto"
    outputs: tuple[str, ...] = ()
    box_format: BoxFormat = "auto"
    grid_strides: tuple[int, ...] | None = None
    """Strides of a YOLOX-style head whose boxes are still grid offsets (exp and stride not applied in
    the graph); None: the boxes are decoded in the graph. `resolve` decides it from the graph."""
    input_hw: tuple[int, int] | None = None
    """The model input's height and width (for the grid decode), filled by `resolve`."""
    background_class: int | None = None
    logits: bool = False
    """True when no Sigmoid/Softmax follows the head's last convolution: scores are logits and get a
    sigmoid before the threshold. `resolve` decides it from the graph."""
    score_threshold: float = 0.25
    nms_iou: float = 0.45
    match_iou: float = 0.5
    class_agnostic_nms: bool = False
    max_detections: int = 300
    metric: DetectionMetric = "f1"
    score_outputs: frozenset[str] = frozenset()
    """Outputs a Sigmoid or Softmax ends in (`resolve`): which output of a gfl level holds the scores."""
    stride: int | None = None
    """A grid head's step between cells in input pixels; None: input size / map size."""
    cell: int | None = None
    """A grid head's window size in input pixels; None: the stride."""
    type: str = "detection"


@dataclass(frozen=True)
class Ctc:
    output: str | None = None
    blank: int = 0
    charset: tuple[str, ...] | None = None
    """Characters of the non-blank classes (or of every class) in index order, read from the charset file."""
    metric: CtcMetric = "exact"
    case_sensitive: bool = True
    """False: characters compared case-folded (the scene-text recognition protocol); needs a charset."""
    type: str = "ctc"


@dataclass(frozen=True)
class Dense:
    output: str | None = None
    threshold: float | None = None
    """Binarization threshold; None: 0.5 for probabilities in [0, 1], else 0 (logits)."""
    generic: bool = False
    type: str = "dense"


@dataclass(frozen=True)
class Tokens:
    """Per-token class scores of a sequence model ([N, T, C] beside [N, T] token ids), scored only at the
    positions the padding mask keeps: padded positions are not the application's output."""

    output: str | None = None
    mask: str | None = None
    """The model input holding the padding mask ([N, T]); None: every position is a token."""
    pad_value: PadValue = 0
    """The mask's value at a padded position: 0 (false: 1 marks a real token, an attention mask) or 1
    (true: PyTorch's key-padding mask)."""
    metric: TokensMetric = "token_agreement"
    type: str = "tokens"


@dataclass(frozen=True)
class Tensor:
    """Regression, embeddings, recurrent state: outputs compared as numbers."""

    outputs: tuple[str, ...] = ()
    generic: bool = False
    """True when no task was declared: the generic measure, named as such in every verdict."""
    type: str = "regression"


TaskConfig = Classification | Detection | Ctc | Dense | Tokens | Tensor
TASK_TYPES = ("classification", "detection", "ctc", "dense", "tokens", "regression")


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _outputs(raw: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(o) for o in (raw.get("outputs") or ()))


def from_evaluate(evaluate: Mapping[str, Any] | None, charset: Path | None = None) -> TaskConfig | None:
    """The declared task of an `evaluate` config, or None when the spec declares none (`generic` then
    decides from the outputs and the labels). `charset` is the file `evaluate.task.charset` names."""
    evaluate = evaluate or {}
    raw = evaluate.get("task")
    if not raw:
        return None
    kind = raw.get("type")
    if kind == "classification":
        threshold = raw.get("threshold")
        return Classification(
            raw.get("output"),
            raw.get("metric") or Classification.metric,
            threshold=None if threshold is None else float(threshold),
        )
    if kind == "detection":
        strides = raw.get("grid_strides")
        return Detection(
            head=raw.get("head") or Detection.head,
            outputs=_outputs(raw),
            box_format=raw.get("box_format") or Detection.box_format,
            grid_strides=tuple(int(s) for s in strides) if strides else None,
            background_class=raw.get("background_class"),
            score_threshold=float(raw.get("score_threshold", Detection.score_threshold)),
            nms_iou=float(raw.get("nms_iou", Detection.nms_iou)),
            match_iou=float(raw.get("match_iou", Detection.match_iou)),
            class_agnostic_nms=bool(raw.get("class_agnostic_nms", Detection.class_agnostic_nms)),
            max_detections=int(raw.get("max_detections", Detection.max_detections)),
            metric=raw.get("metric") or Detection.metric,
            stride=_optional_int(raw.get("stride")),
            cell=_optional_int(raw.get("cell")),
        )
    if kind == "ctc":
        chars = read_charset(charset) if charset is not None else None
        case_sensitive = bool(raw.get("case_sensitive", Ctc.case_sensitive))
        if not case_sensitive and chars is None:
            raise TerminalError(
                "evaluate.task.case_sensitive: false compares characters; set evaluate.task.charset"
            )
        return Ctc(
            raw.get("output"),
            int(raw.get("blank", Ctc.blank)),
            chars,
            raw.get("metric") or Ctc.metric,
            case_sensitive,
        )
    if kind == "dense":
        threshold = raw.get("threshold")
        return Dense(raw.get("output"), None if threshold is None else float(threshold))
    if kind == "tokens":
        pad = int(raw.get("pad_value", Tokens.pad_value))
        return Tokens(
            raw.get("output"),
            raw.get("mask"),
            1 if pad else 0,
            raw.get("metric") or Tokens.metric,
        )
    if kind == "regression":
        return Tensor(_outputs(raw))
    raise TerminalError(f"evaluate.task.type must be one of {', '.join(TASK_TYPES)}, got {kind!r}")


def read_charset(path: Path) -> tuple[str, ...]:
    """One character (or token) per line, in class-index order; a line holding only a space is the space."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TerminalError(f"evaluate.task.charset: cannot read {path.name}: {exc}") from exc
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    chars = tuple(line.rstrip("\r") for line in lines)
    if not chars:
        raise TerminalError(f"evaluate.task.charset: {path.name} is empty")
    return chars


@dataclass(frozen=True)
class Graph:
    """What `resolve` needs of the model: its input sizes and which ops feed each output's head."""

    input_hw: tuple[int, int] | None
    output_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """Output name -> its static shape (0 for an unknown dimension)."""
    head_ops: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Output name -> op types between the output and the last Conv/MatMul/Gemm before it."""


def graph_facts(model: Path | onnx.ModelProto) -> Graph:
    import onnx

    proto = onnx.load(str(model), load_external_data=False) if isinstance(model, Path) else model
    inits = {t.name for t in proto.graph.initializer}
    hw = None
    for value in proto.graph.input:
        if value.name in inits:
            continue
        hw = image_hw([d.dim_value for d in value.type.tensor_type.shape.dim])
        break
    heads = {out.name: tail_ops(proto.graph, out.name) for out in proto.graph.output}
    shapes = {o.name: tuple(d.dim_value for d in o.type.tensor_type.shape.dim) for o in proto.graph.output}
    return Graph(hw, shapes, heads)


def image_hw(dims: list[int]) -> tuple[int, int] | None:
    """Height and width of an image input [N, C, H, W], or [N, H, W, C] when its last axis holds the
    few channels (1, 3 or 4) and its second does not; None when either is unknown (0)."""
    if len(dims) != 4:
        return None
    h, w = (dims[1], dims[2]) if dims[3] in (1, 3, 4) and dims[1] not in (1, 3, 4) else (dims[2], dims[3])
    return (h, w) if h > 0 and w > 0 else None


def tail_ops(graph: Any, output: str, depth: int = 0) -> frozenset[str]:
    """Op types between `output` and the last Conv/MatMul/Gemm before it; an If, Loop or Scan on the
    way adds its bodies' tails (a model that picks its branch at run time still ends in a Sigmoid)."""
    inits = {t.name for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    ops: set[str] = set()
    seen: set[int] = set()
    frontier = [output]
    while frontier:
        node = producer.get(frontier.pop())
        if node is None or id(node) in seen or len(seen) > 2000:
            continue
        seen.add(id(node))
        ops.add(node.op_type)
        for attr in node.attribute if depth < 4 else ():
            for body in [attr.g] if attr.HasField("g") else list(attr.graphs):
                for out in body.output:
                    ops |= tail_ops(body, out.name, depth + 1)
        if node.op_type not in ("Conv", "MatMul", "Gemm"):
            frontier.extend(i for i in node.input if i and i not in inits)
    return frozenset(ops)


_REARRANGING = frozenset(
    {"Transpose", "Reshape", "Identity", "Squeeze", "Unsqueeze", "Flatten", "Cast", "Slice", "Gather"}
)
_WITH_A_CONSTANT = frozenset({"Add", "Sub", "Mul", "Div"})
_SCORING = frozenset(
    {"MatMul", "Gemm", "Conv", "Einsum", "MatMulInteger", "QLinearMatMul", "LogSoftmax", "Softmax", "Sigmoid"}
)


def last_layer(graph: Any, output: str) -> str:
    """The op type that computes `output`'s values: the first node back from it that is neither a
    rearrangement (Transpose, Reshape, a Slice or Gather of it...) nor arithmetic with a constant (a
    bias Add, a temperature Div). A class-score output ends in a linear layer or a Softmax/Sigmoid
    after one; a recurrent layer's or a normalisation's output at the end is features, whatever its
    shape."""
    constants = {t.name for t in graph.initializer}
    constants |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    producer = {o: n for n in graph.node for o in n.output}
    name = output
    for _ in range(64):
        node = producer.get(name)
        if node is None:
            return ""
        live = [i for i in node.input if i and i not in constants]
        if node.op_type in _REARRANGING or (node.op_type in _WITH_A_CONSTANT and len(live) == 1):
            if not live:
                return node.op_type
            name = live[0]
            continue
        return str(node.op_type)
    return ""


def scores_output(graph: Any, output: str) -> bool:
    """True when `output` reads as class scores (see last_layer): its values come from a linear layer,
    or a Softmax/Sigmoid over one."""
    return last_layer(graph, output) in _SCORING


YOLO_STRIDES = (8, 16, 32)
SQUASHING = frozenset({"Sigmoid", "Softmax", "HardSigmoid"})
"""Ops that make probabilities of scores: without one after the head's last layer, scores are logits."""


def resolve(task: TaskConfig | None, model: Path | onnx.ModelProto | None) -> TaskConfig | None:
    """`task` with what the graph decides filled in: whether the scores are logits (no Sigmoid or Softmax
    after the head's last convolution), and for a YOLOX-style head with no Exp there (the boxes are still
    grid offsets), the strides whose grid has exactly as many cells as the head has rows."""
    if isinstance(task, Classification) and task.threshold is None and model is not None:
        facts = graph_facts(model)
        head = facts.head_ops.get(task.output or next(iter(facts.head_ops), ""), frozenset())
        return replace(task, logits=not (head & SQUASHING))
    if not isinstance(task, Detection) or model is None:
        return task
    facts = graph_facts(model)
    ops = frozenset().union(*facts.head_ops.values()) if facts.head_ops else frozenset()
    task = replace(
        task,
        input_hw=task.input_hw or facts.input_hw,
        logits=task.logits or not (ops & SQUASHING),
        score_outputs=frozenset(name for name, tail in facts.head_ops.items() if tail & SQUASHING),
    )
    if task.grid_strides is not None or task.head in ("yolov8", "ssd", "gfl", "centernet", "grid"):
        return task
    if "Exp" in ops or task.input_hw is None:
        return task
    cells = grid_cells(task.input_hw, YOLO_STRIDES)
    if not any(cells in shape for shape in facts.output_shapes.values()):
        return task
    return replace(task, grid_strides=YOLO_STRIDES)


def grid_cells(input_hw: tuple[int, int], strides: tuple[int, ...]) -> int:
    return sum((input_hw[0] // s) * (input_hw[1] // s) for s in strides)
