"""`evaluate.task`: what the model's outputs mean, so accuracy is measured the way the application reads
them (one metric for evaluate, the auto sensitive-layer search and the SLOs; backends.tasks computes it).

Part of the spec models (reconciler.spec.models); a discriminated union on `type`. The defaults and the
choices are backends.tasks.config's, which the backends read the same section with.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from backends.tasks.config import (
    BoxFormat,
    Classification,
    ClassificationMetric,
    Ctc,
    CtcMetric,
    Detection,
    DetectionMetric,
    Head,
    PadValue,
    Tokens,
    TokensMetric,
)
from reconciler.spec.pathfields import SpecPath

Fraction = Annotated[float, Field(ge=0, le=1)]
OutputName = Annotated[str, Field(min_length=1, max_length=256)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class ClassificationTask(_Strict):
    type: Literal["classification"] = Field(..., description="Class scores, one vector per sample.")
    output: OutputName | None = Field(
        default=None, description="Output holding the scores; default: the first."
    )
    metric: ClassificationMetric = Field(
        default=Classification.metric,
        description="With integer labels: top-1 or top-5 accuracy. Without labels: top-1 agreement with the "
        "float model.",
    )
    threshold: float | None = Field(
        default=None,
        description="An output with one score per sample (voice activity, wake word, a sigmoid classifier) "
        "is a yes/no decision: score > threshold. Default: 0.5 when a Sigmoid or Softmax makes the score, "
        "else 0 (a logit). Labels are then 0 or 1; without labels, decision agreement with the float model.",
    )

    @model_serializer(mode="wrap")
    def _unset_threshold_left_out(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """Added after specs were built with this task: left out while unset, so the stage keys of
        every existing spec (and their committed lock files) stay what they were."""
        data: dict[str, object] = handler(self)
        if data.get("threshold") is None:
            data.pop("threshold", None)
        return data


class DetectionTask(_Strict):
    type: Literal["detection"] = Field(..., description="Boxes with class scores, decoded then matched.")
    head: Head = Field(
        default=Detection.head,
        description="Head layout. auto decides from the output shapes: one [1, 4+C, N] output is YOLOv8-style "
        "(no objectness), one [1, N, 5+C] output is YOLOX/YOLOv5-style (objectness x class score), either beside a "
        "prototype output [1, K, H, W] is its segmentation form (the last K attributes are mask coefficients), a boxes "
        "[1, N, 4] and a scores [1, N, C] output are SSD-style; per feature level a scores [1, N, C] and a box-distribution "
        "[1, N, 4*(R+1)] output are GFL-style (PicoDet, NanoDet). A YOLOX head without the grid decode in its "
        "graph (no Exp after its last convolution) is decoded with strides 8, 16, 32. Outputs that are maps "
        "of one grid: a heatmap, a size map and an offset map are CenterNet-style (centernet); a score map "
        "beside a 4-channel box map is a per-cell grid head (grid, with stride and cell).",
    )
    outputs: list[OutputName] = Field(
        default_factory=list, max_length=4, description="Outputs the head reads; default: all of them."
    )
    box_format: BoxFormat = Field(
        default=Detection.box_format,
        description="Box coordinates; auto: cxcywh for YOLO heads, xyxy for SSD.",
    )
    grid_strides: list[Annotated[int, Field(gt=0, le=1024)]] | None = Field(
        default=None,
        max_length=8,
        description="Strides of a YOLOX head whose boxes are still grid offsets; default: decided from the graph.",
    )
    background_class: Annotated[int, Field(ge=0)] | None = Field(
        default=None, description="A score column that is background (SSD), skipped."
    )
    score_threshold: Fraction = Field(
        default=Detection.score_threshold, description="Boxes scoring above this are kept."
    )
    nms_iou: Fraction = Field(
        default=Detection.nms_iou, description="NMS drops a box overlapping a kept one by more."
    )
    match_iou: Fraction = Field(
        default=Detection.match_iou, description="IoU at which a box matches a true one (F1, mAP)."
    )
    class_agnostic_nms: bool = Field(
        default=Detection.class_agnostic_nms, description="NMS across classes instead of per class."
    )
    max_detections: Annotated[int, Field(gt=0, le=100_000)] = Field(
        default=Detection.max_detections, description="At most this many boxes per sample after NMS."
    )
    metric: DetectionMetric = Field(
        default=Detection.metric,
        description="f1: box F1 at match_iou; map: mean average precision at match_iou. Against the boxes of "
        "evaluate.labels (JSON: file name -> [[x1, y1, x2, y2, class], ...]) or the float model's boxes.",
    )
    stride: Annotated[int, Field(gt=0, le=1024)] | None = Field(
        default=Detection.stride,
        description="A grid head's step between cells, in input pixels; default: input size / map size.",
    )
    cell: Annotated[int, Field(gt=0, le=4096)] | None = Field(
        default=Detection.cell,
        description="A grid head's window size, in input pixels (MTCNN's proposal net: 12); default: the stride.",
    )

    @model_serializer(mode="wrap")
    def _unset_grid_left_out(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """Fields of the grid head, left out while unset, so the stage keys of every existing
        detection spec (and their committed lock files) stay what they were."""
        data: dict[str, object] = handler(self)
        for name in ("stride", "cell"):
            if data.get(name) is None:
                data.pop(name, None)
        return data


class CtcTask(_Strict):
    type: Literal["ctc"] = Field(..., description="Sequence recognition with CTC (text lines).")
    output: OutputName | None = Field(
        default=None,
        description="Output of per-step class scores [1, T, C] or [T, 1, C]; default: the first.",
    )
    blank: Annotated[int, Field(ge=0)] = Field(default=Ctc.blank, description="Class index of the CTC blank.")
    charset: Annotated[str, SpecPath("file", input="charset")] | None = Field(
        default=None,
        description="Characters file, one per line in class order (with or without the blank), relative to "
        "the spec; needed for text labels (`<file name><TAB><text>` lines).",
    )
    metric: CtcMetric = Field(
        default=Ctc.metric,
        description="exact: string exact-match rate; char_accuracy: 1 - character error rate. Both are "
        "reported; against the labels or the float model's strings.",
    )
    case_sensitive: bool = Field(
        default=Ctc.case_sensitive,
        description="false: strings compared after Unicode case folding, as scene-text recognition "
        "benchmarks score them (a 'w' and a 'W' drawn at one size are the same glyph); needs the charset.",
    )


class DenseTask(_Strict):
    type: Literal["dense"] = Field(..., description="Single-channel dense map [N, 1, H, W] (text, mask).")
    output: OutputName | None = Field(default=None, description="Output holding the map; default: the first.")
    threshold: Annotated[float, Field(allow_inf_nan=False)] | None = Field(
        default=None,
        description="Binarization threshold: a map value above it is foreground; default 0.5 for "
        "probabilities, 0 for logits. The verdict is the pooled IoU; the mean and lowest per-image IoU "
        "are reported beside it.",
    )


class TokensTask(_Strict):
    type: Literal["tokens"] = Field(
        ..., description="Per-token class scores of a sequence model (a tagger, a segmenter)."
    )
    output: OutputName | None = Field(
        default=None, description="Output of per-token scores [N, T, C] (classes last); default: the first."
    )
    mask: Annotated[str, Field(min_length=1, max_length=256)] | None = Field(
        default=Tokens.mask,
        description="The model input holding the padding mask [N, T]: padded positions are left out of "
        "every figure (the auto search's too); default: none, every position is a token.",
    )
    pad_value: PadValue = Field(
        default=Tokens.pad_value,
        description="The mask's value at a padded position: 0 (false; 1 marks a real token, as an attention "
        "mask does) or 1 (true, as PyTorch's key-padding mask does).",
    )
    metric: TokensMetric = Field(
        default=Tokens.metric,
        description="token_agreement: the fraction of unpadded tokens whose class (argmax) is the float "
        "model's; sequence_match: the fraction of sequences whose every unpadded token's is. Both are "
        "reported, with the cosine of the unpadded scores.",
    )


class RegressionTask(_Strict):
    type: Literal["regression"] = Field(
        ..., description="Numbers compared as numbers (regression, embeddings, recurrent state)."
    )
    outputs: list[OutputName] = Field(
        default_factory=list, max_length=64, description="Outputs compared; default: all of them."
    )


Task = Annotated[
    ClassificationTask | DetectionTask | CtcTask | DenseTask | TokensTask | RegressionTask,
    Field(discriminator="type"),
]
