"""Detection: decode the head the way the application does, then box F1 and mAP at an IoU.

Heads, decided from the output shapes (and `evaluate.task.head` when given):
- YOLOv8-style anchor-free, one output [1, 4+C, N] (attributes before anchors): boxes cx, cy, w, h,
  then C class scores; a box's score is its best class score.
- YOLOX/YOLOv5-style with objectness, one output [1, N, 5+C] (anchors before attributes): box, object
  score, C class scores; a box's score is objectness times its best class score.
- Their segmentation forms (YOLOv8-seg, YOLOv5-seg): the same output beside a prototype output
  [1, K, H, W]; the head's last K attributes are mask coefficients, not classes, and are left out
  (boxes are scored, masks are not). A YOLOX head whose
  graph stops before the grid decode (no Exp after its last convolution; `config.resolve`) gets it here:
  centre = (offset + cell) * stride, size = exp(raw) * stride.
- SSD-style, two outputs: boxes [1, N, 4] (x1, y1, x2, y2) and scores [1, N, C] (an optional
  background column is skipped).
- GFL-style (PicoDet, NanoDet), a scores [1, N, C] and a box-distribution [1, N, 4 * (R + 1)] output per
  feature level (backends.tasks.gfl).
- Map heads, outputs that are feature maps of one grid (backends.tasks.maps): CenterNet-style (a
  heatmap, a size map and an offset map) and per-cell grid heads (MTCNN's proposal net: a score map
  and a 4-channel box map, with the spec's `stride` and `cell`).
Scores are probabilities, or logits when no Sigmoid/Softmax follows the head's last convolution
(`config.resolve`), which get a sigmoid first. Then a score threshold and greedy NMS per class (or
class-agnostic). Against ground-truth boxes when
labels are given, against the float model's decoded boxes otherwise: F1 of greedy matches at
`match_iou`, and the all-point mean average precision at the same IoU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from backends.sdk.errors import TerminalError
from backends.tasks import gfl, maps
from backends.tasks.base import TaskMetric, TaskScore
from backends.tasks.boxes import BoxTally, Detections, nms
from backends.tasks.config import Detection, grid_cells

if TYPE_CHECKING:
    import numpy as np


def head_of(config: Detection, shapes: Sequence[tuple[int, ...]]) -> str:
    """yolov8 | yolox | ssd | gfl | centernet | grid, from the config or the output shapes."""
    if config.head != "auto":
        return config.head
    seg = _segmentation(shapes)
    if seg is not None:
        rows, cols = _matrix_shape(shapes[seg[0]])
        return "yolov8" if rows < cols else "yolox"
    on_maps = maps.head_of(shapes)
    if on_maps is not None:
        return on_maps
    if len(shapes) >= 2 and _ssd_pair(shapes) is not None:
        return "ssd"
    if len(shapes) >= 4 and gfl.looks_like_gfl(shapes, config.input_hw):
        return "gfl"
    if len(shapes) > 1 and all(len(s) == 3 for s in shapes):
        raise TerminalError(
            f"evaluate.task: {len(shapes)} outputs of shapes {[list(s) for s in shapes]} match no head "
            "(yolov8, yolox, ssd, gfl, centernet, grid): name the one output a yolov8/yolox head reads in evaluate.task.outputs"
        )
    rows, cols = _matrix_shape(shapes[0])
    return "yolov8" if rows < cols else "yolox"


def _segmentation(shapes: Sequence[tuple[int, ...]]) -> tuple[int, int] | None:
    """(index of the head output, K) for a YOLO segmentation head: one [1, A, B] output beside one
    prototype output [1, K, H, W] whose K the head's attributes (the shorter of A, B) exceed by more
    than a box; None otherwise."""
    heads = [i for i, s in enumerate(shapes) if len(s) == 3 and s[0] == 1]
    protos = [s for s in shapes if len(s) == 4 and s[0] == 1]
    if len(shapes) != 2 or len(heads) != 1 or len(protos) != 1:
        return None
    attributes, k = min(shapes[heads[0]][1:]), protos[0][1]
    return (heads[0], k) if attributes > 4 + k else None


def _ssd_pair(shapes: Sequence[tuple[int, ...]]) -> tuple[int, int] | None:
    """Boxes [1, N, 4] and scores [1, N, C] (or [N, 4] and [N, C]): rank 2 or 3, one row per anchor."""
    for i, box in enumerate(shapes):
        if len(box) in (2, 3) and box[-1] == 4 and box[-2] > 1:
            for j, score in enumerate(shapes):
                if j != i and len(score) == len(box) and score[-2] == box[-2]:
                    return i, j
    return None


def _matrix_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    dims = list(shape)
    while len(dims) > 2 and dims[0] == 1:
        dims.pop(0)
    if len(dims) != 2:
        raise TerminalError(f"a detection head needs a [1, A, B] output, got shape {list(shape)}")
    return dims[0], dims[1]


def _select(config: Detection, names: Sequence[str], outputs: Sequence[Any]) -> list[Any]:
    if not config.outputs:
        return list(outputs)
    missing = [o for o in config.outputs if o not in names]
    if missing:
        raise TerminalError(
            f"evaluate.task.outputs: the model has no output {', '.join(missing)} (outputs: {', '.join(names)})"
        )
    return [outputs[list(names).index(o)] for o in config.outputs]


def decode(config: Detection, names: Sequence[str], outputs: Sequence[Any]) -> Detections:
    """One sample's detections after the score threshold and NMS."""
    import numpy as np

    chosen = [np.asarray(o, dtype=np.float64) for o in _select(config, names, outputs)]
    head = head_of(config, [a.shape for a in chosen])
    objectness = None
    if head == "ssd":
        pair = _ssd_pair([a.shape for a in chosen])
        if pair is None:
            raise TerminalError("an ssd head needs a boxes output [1, N, 4] and a scores output [1, N, C]")
        boxes = chosen[pair[0]].reshape(-1, 4)
        scores = chosen[pair[1]].reshape(boxes.shape[0], -1)
        fmt = "xyxy" if config.box_format == "auto" else config.box_format
    elif head == "gfl":
        chosen_names = list(config.outputs) if config.outputs else list(names)
        boxes, scores = gfl.decode(chosen, chosen_names, config.input_hw, config.score_outputs)
        fmt = "xyxy"
    elif head in ("centernet", "grid"):
        boxes, scores = _on_maps(config, head, chosen)
        return _threshold_nms(config, boxes, scores)
    else:
        seg = _segmentation([a.shape for a in chosen])
        at, masks = seg if seg is not None else (0, 0)
        rows, cols = _matrix_shape(chosen[at].shape)
        table = chosen[at].reshape(rows, cols)
        if head == "yolov8":
            table = table.T
            boxes, scores = table[:, :4], table[:, 4 : table.shape[1] - masks]
        else:
            table = _grid_decoded(config, table)
            boxes, objectness, scores = table[:, :4], table[:, 4:5], table[:, 5 : table.shape[1] - masks]
        fmt = "cxcywh" if config.box_format == "auto" else config.box_format
    if scores.shape[1] == 0:
        raise TerminalError(f"the {head} head has no class scores (shape {list(chosen[0].shape)})")
    if config.logits:
        scores = _sigmoid(scores)
        objectness = None if objectness is None else _sigmoid(objectness)
    if objectness is not None:
        scores = scores * objectness
    return _threshold_nms(config, _xyxy(boxes, fmt), scores)


def _on_maps(config: Detection, head: str, chosen: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Boxes and scores of a map head; its scores are probabilities (a heatmap's Sigmoid, a Softmax)."""
    if head == "centernet":
        heat = _sigmoid(chosen[0]) if config.logits else chosen[0]
        return maps.centernet([heat, *chosen[1:]], config.input_hw, config.score_threshold)
    axis = maps.channel_axis([a.shape for a in chosen])
    if axis is None:
        raise TerminalError("a grid head needs a score map and a 4-channel box map of one grid")
    map_h = chosen[0].shape[2 if axis == 1 else 1]
    stride = config.stride or (round(config.input_hw[0] / map_h) if config.input_hw else 1)
    return maps.grid(chosen, stride, config.cell or stride)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    import numpy as np

    out: np.ndarray = 1.0 / (1.0 + np.exp(-np.clip(x, -60, 60)))
    return out


def _grid_decoded(config: Detection, table: np.ndarray) -> np.ndarray:
    import numpy as np

    if config.grid_strides is None:
        return table
    if config.input_hw is None:
        raise TerminalError("the grid decode needs the model input's height and width")
    h, w = config.input_hw
    if table.shape[0] != grid_cells((h, w), config.grid_strides):
        raise TerminalError(
            f"evaluate.task.grid_strides {list(config.grid_strides)} give {grid_cells((h, w), config.grid_strides)} "
            f"cells for a {h}x{w} input, the head has {table.shape[0]} rows"
        )
    cells, strides = [], []
    for s in config.grid_strides:
        ys, xs = np.meshgrid(np.arange(h // s), np.arange(w // s), indexing="ij")
        cells.append(np.stack([xs.reshape(-1), ys.reshape(-1)], 1))
        strides.append(np.full((xs.size, 1), float(s)))
    grid, stride = np.concatenate(cells).astype(np.float64), np.concatenate(strides)
    out = table.copy()
    out[:, :2] = (table[:, :2] + grid) * stride
    out[:, 2:4] = np.exp(np.clip(table[:, 2:4], -50, 50)) * stride
    return out


def _xyxy(boxes: np.ndarray, fmt: str) -> np.ndarray:
    import numpy as np

    if fmt == "xyxy":
        return boxes
    cx, cy, w, h = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)


def _threshold_nms(config: Detection, boxes: np.ndarray, scores: np.ndarray) -> Detections:
    import numpy as np

    columns = np.arange(scores.shape[1])
    if config.background_class is not None:
        columns = columns[columns != config.background_class]
    best = columns[np.argmax(scores[:, columns], axis=1)]
    top = scores[np.arange(scores.shape[0]), best]
    keep = np.isfinite(top) & (top > config.score_threshold) & np.isfinite(boxes).all(axis=1)
    found = Detections(boxes[keep], top[keep], best[keep].astype(np.int64))
    return nms(found, config.nms_iou, config.class_agnostic_nms, config.max_detections)


def truth(label: Any, sample: int) -> Detections:
    """Ground-truth boxes of one sample: a list of [x1, y1, x2, y2, class] in model-input pixels."""
    import numpy as np

    rows = np.asarray(label, dtype=np.float64).reshape(-1, 5) if len(label) else np.zeros((0, 5))
    return Detections(rows[:, :4], np.ones(len(rows)), rows[:, 4].astype(np.int64))


class DetectionMetric(TaskMetric):
    task = "detection"

    def __init__(self, config: Detection, names: Sequence[str], labelled: bool) -> None:
        super().__init__(names, labelled)
        self.config = config
        self.tally = BoxTally(config.match_iou)
        self.reference_tally = BoxTally(config.match_iou)
        self.boxes = {"reference": 0, "candidate": 0}

    def _add(self, reference: Sequence[Any], outputs: Sequence[Any], label: Any) -> None:
        ref = decode(self.config, self.names, reference)
        out = decode(self.config, self.names, outputs)
        self.boxes["reference"] += len(ref)
        self.boxes["candidate"] += len(out)
        if self.labelled:
            gt = truth(label, self.samples)
            self.tally.add(out, gt)
            self.reference_tally.add(ref, gt)
        else:
            self.tally.add(out, ref)

    def result(self) -> TaskScore:
        if not self.samples:
            raise TerminalError("detection needs at least one sample")
        iou = f"{self.config.match_iou:g}"
        truth_text = "ground-truth boxes" if self.labelled else "the float model's boxes"
        f1, ap = self.tally.f1(), self.tally.mean_ap()
        ref_f1, ref_ap = (
            (self.reference_tally.f1(), self.reference_tally.mean_ap()) if self.labelled else (1.0, 1.0)
        )
        extra = {
            f"box_f1@{iou}": f1,
            f"map@{iou}": ap,
            "boxes": float(self.boxes["candidate"]),
            "reference_boxes": float(self.boxes["reference"]),
        }
        setting = f"score > {self.config.score_threshold:g}, NMS IoU {self.config.nms_iou:g}" + (
            " class-agnostic" if self.config.class_agnostic_nms else ""
        )
        if self.config.metric == "map":
            text = f"mAP at IoU {iou} against {truth_text} ({setting})"
            return TaskScore(self.task, f"map@{iou}", text, self.against, ap, ref_ap, extra)
        text = f"box F1 at IoU {iou} against {truth_text} ({setting})"
        return TaskScore(self.task, f"box_f1@{iou}", text, self.against, f1, ref_f1, extra)
