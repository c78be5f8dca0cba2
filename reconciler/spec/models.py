"""The deployment spec, apiVersion npuctl/v1: the single source of truth for its JSON Schema.

Every model forbids unknown keys, and every field has a description and an explicit default, because
the schema generated from these classes is what editors complete against and what the README documents.
The engine reads a spec only through the field paths each stage declares (reconciler.engine.stages),
so adding a field here changes no build key until a stage declares that it reads it.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from backends.passes.quant.policy import (
    CALIBRATION_SAMPLES,
    AutoBudget,
    IntType,
    Keep,
    Method,
    Mode,
    Placement,
    Policy,
    SensitiveRules,
)
from backends.runners import url as runner_url
from reconciler.spec.pathfields import SpecPath
from reconciler.spec.task_models import Task

API_VERSION = "npuctl/v1"

PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
SCALAR = "scalar"


def _scalar_shape(value: Any) -> Any:
    """`scalar` is the rank-0 shape, the same as `[]` (a sample rate, a threshold)."""
    return [] if value == SCALAR else value


MAX_INPUT_ELEMENTS = 1 << 28
"""Elements one input may hold (268 M: 1 GiB of float32); validate refuses more before anything is
allocated (`[1000000000, 1, 8, 8]` would ask a build for 477 GiB)."""
MAX_TIMEOUT_S = 86_400.0
"""A runner timeout is finite: at most a day."""


def _bounded_elements(dims: list[int]) -> list[int]:
    if math.prod(dims) > MAX_INPUT_ELEMENTS:
        raise ValueError(
            f"{dims} holds {math.prod(dims)} elements, more than the limit of {MAX_INPUT_ELEMENTS} per input"
        )
    return dims


_Dims = Annotated[list[PositiveInt], Field(max_length=8)]
Shape = Annotated[
    _Dims,
    BeforeValidator(_scalar_shape, json_schema_input_type=_Dims | Literal["scalar"]),
    AfterValidator(_bounded_elements),
]
"""Fixed dimensions of one input; `[]` or `scalar` for a rank-0 input."""

_NAME = r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$"
_SHA256 = r"^[0-9a-f]{64}$"
_RUNNER = runner_url.PATTERN


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class Metadata(_Strict):
    name: str = Field(
        ..., pattern=_NAME, description="Deployment name: lower-case letters, digits, '.', '_' and '-'."
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description="Free-form labels; they never change a build key."
    )
    description: str = Field(default="", max_length=2000, description="Free text; never changes a build key.")


class ModelRef(_Strict):
    path: Annotated[str, SpecPath("file", input="model", package="package")] | None = Field(
        default=None,
        description="ONNX file, relative to the spec file; must stay inside the repository.",
    )
    package: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="A top-level installed Python package that ships the model; `path` is then relative to "
        "the package's folder (for example package: rapidocr_onnxruntime, path: models/x.onnx). The package "
        "is located, never imported: a spec runs no code.",
    )
    sha256: str | None = Field(
        default=None, pattern=_SHA256, description="Optional pin: the model file's sha256 must equal it."
    )
    version: str | None = Field(
        default=None,
        max_length=128,
        description="A human version label recorded with every verdict; the file digest identifies the model.",
    )

    @model_validator(mode="after")
    def _needs_path(self) -> ModelRef:
        if self.path is None:
            raise ValueError("model.path is required (relative to the spec, or to `package`)")
        return self


class Color(_Strict):
    from_: Literal["rgb", "bgr", "gray"] = Field(
        default="bgr", alias="from", description="Channel order the application feeds."
    )
    to: Literal["rgb", "bgr", "gray"] = Field(default="rgb", description="Channel order the model expects.")


class Resize(_Strict):
    height: PositiveInt = Field(..., description="Height the model expects.")
    width: PositiveInt = Field(..., description="Width the model expects.")
    mode: Literal["linear", "nearest", "cubic"] = Field(default="linear", description="Interpolation.")
    source_height: PositiveInt | None = Field(
        default=None,
        description="Height of the frames the application feeds; none leaves the raw input's height dynamic "
        "(NPU compilers need it fixed).",
    )
    source_width: PositiveInt | None = Field(
        default=None, description="Width of the frames the application feeds; none leaves it dynamic."
    )


class Preprocess(_Strict):
    input: str | None = Field(
        default=None, description="Model input that receives the raw frame; default: the first input."
    )
    layout: Literal["nhwc", "nchw"] = Field(default="nhwc", description="Layout the application feeds.")
    dtype: Literal["uint8", "float32"] = Field(
        default="uint8", description="Element type the application feeds."
    )
    color: Color | None = Field(default=None, description="Channel-order conversion; none keeps the order.")
    resize: Resize | None = Field(default=None, description="Resize folded into the model; none: no resize.")
    mean: list[float] | None = Field(
        default=None,
        min_length=1,
        max_length=4,
        description="Per-channel mean subtracted first (canonical form).",
    )
    std: list[float] | None = Field(
        default=None, min_length=1, max_length=4, description="Per-channel std divided by after the mean."
    )

    @field_validator("std")
    @classmethod
    def _std_positive(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and any(s <= 0 for s in v):
            raise ValueError("every std value must be > 0")
        return v

    @model_validator(mode="after")
    def _mean_std_same_length(self) -> Preprocess:
        if self.mean is not None and self.std is not None and len(self.mean) != len(self.std):
            raise ValueError("mean and std must have the same number of channels")
        return self


class Fusion(_Strict):
    conv_bn: bool = Field(default=True, description="Fold BatchNormalization into the preceding Conv.")
    conv_activation: bool = Field(
        default=True, description="Fuse Conv with a following Relu/Clip/activation."
    )
    matmul_add: bool = Field(default=True, description="Fuse MatMul + Add into Gemm.")
    constant_folding: bool = Field(default=True, description="Fold subgraphs whose inputs are all constant.")


def _known_rewrite(name: str) -> str:
    """A rewrite the library registers (backends.passes.rewrite.rules.names)."""
    from backends.passes.rewrite.rules import names
    from reconciler.spec._suggest import suggest

    known = names()
    if name not in known:
        raise ValueError(f"unknown rewrite {name!r}{suggest(name, known, 'the rewrites', limit=60)}")
    return name


class Rewrite(_Strict):
    replace_unsupported: bool = Field(
        default=False,
        description="Rewrite ops the target cannot run into numerically equivalent ones it can.",
    )
    fusion: Fusion = Field(default_factory=Fusion, description="One switch per fusion pattern.")
    exclude: list[str] = Field(
        default_factory=list, description="Node names or glob patterns that no rewrite or fusion may touch."
    )
    disable: list[Annotated[str, AfterValidator(_known_rewrite)]] = Field(
        default_factory=list,
        description=(
            "Rewrites (by name, as the rewrite stage reports them) that never fire on this spec, the "
            "converter forms applied before each converter included (e.g. unrolled_lstm)."
        ),
    )


class Calibration(_Strict):
    data: Annotated[str, SpecPath("folder", input="calibration_data")] = Field(
        ..., description="Folder of .npy/.npz files or images, relative to the spec file."
    )
    samples: PositiveInt = Field(
        default=CALIBRATION_SAMPLES,
        le=100_000,
        description="Exactly this many samples are used; fewer available is an error.",
    )
    method: Method = Field(
        default=Policy.method, description="How activation ranges are computed from the samples."
    )
    percentile: float = Field(
        default=Policy.percentile, gt=90, le=100, description="Percentile kept by method `percentile`."
    )
    seed: int = Field(
        default=Policy.seed, ge=0, description="Fixes which samples are drawn when the folder has more."
    )


class AutoSensitive(_Strict):
    max_accuracy_drop: float = Field(
        default=AutoBudget.max_accuracy_drop,
        ge=0,
        le=1,
        description="Accuracy budget: keep layers in float until the drop is within it.",
    )
    max_layers: PositiveInt = Field(
        default=AutoBudget.max_layers, le=1000, description="At most this many layers kept in float."
    )


class SensitiveLayers(_Strict):
    keep: Keep = Field(
        default=SensitiveRules.keep,
        description="Precision kept for the matched layers (int16 through tensor overrides).",
    )
    nodes: list[str] = Field(
        default_factory=list, description="Node names or glob patterns; a rule matching nothing is an error."
    )
    op_types: list[str] = Field(
        default_factory=list,
        description="ONNX op types (e.g. Softmax); a type absent from the model is an error.",
    )
    first: NonNegativeInt = Field(
        default=SensitiveRules.first, description="Keep the first N compute layers."
    )
    last: NonNegativeInt = Field(default=SensitiveRules.last, description="Keep the last N compute layers.")
    auto: AutoSensitive | None = Field(
        default=None, description="Find more layers by measured per-layer sensitivity."
    )


class Quantization(_Strict):
    mode: Mode = Field(
        default=Policy.mode,
        description="none: float32; fp16: half precision; ptq: post-training quantization with "
        "calibration data; qat: the model already carries QDQ nodes.",
    )
    weights: IntType = Field(
        default=Policy.weights,
        description="Weight type for ptq (int16/uint16 too). Signed weights are quantized symmetrically.",
    )
    activations: IntType | None = Field(
        default=None,
        description="Activation type for ptq. Default follows the target (its catalog `default_activation`): "
        "uint8 on the host CPU (int8 activations ran ~2x slower than fp32 under ONNX Runtime on x86, uint8 "
        "1.2-1.6x faster), uint8 on Qualcomm HTP (uint16 for layers kept with `keep: int16`, as HTP runs "
        "A16W8 natively), int8 on RKNN (w8a8). A type the target does not support is an error.",
    )
    per_channel: bool = Field(
        default=Policy.per_channel,
        description="Per-channel weight scales. Models below opset 13 are raised to 13 first (per-channel "
        "DequantizeLinear needs its `axis` attribute; opset 11/12 QDQ models do not load).",
    )
    symmetric: bool | None = Field(
        default=None,
        description="Symmetric activation ranges; default follows the activation type (signed: symmetric, "
        "unsigned: asymmetric).",
    )
    placement: Placement = Field(
        default=Policy.placement,
        description="ptq: where Q/DQ go. target: on the inputs of the ops the target runs in integer (its op "
        "table); the tail after the last compute op (decode, post-processing) and concats of mixed ranges "
        "stay float on targets that run float layers. every_op: ONNX Runtime's default, every op it can "
        "quantize, tails included.",
    )
    bias_correction: bool = Field(
        default=Policy.bias_correction,
        description="ptq: fold each quantized Conv/Gemm's mean output shift per channel (int8 weights "
        "against float, the layer fed its float input, on up to 32 calibration samples) into its int32 "
        "bias, where npuctl builds the QDQ model (ONNX Runtime-based targets) and in NNCF (its bias "
        "correction). RKNN's and TFLite's converters have no such step.",
    )
    keep_io_types: bool = Field(
        default=Policy.keep_io_types,
        description="fp16: keep float32 model inputs and outputs (Cast nodes at the boundary); false makes "
        "the model's I/O float16.",
    )
    calibration: Calibration | None = Field(
        default=None,
        description="Required for ptq. Activation ranges are cached by the digest of the samples used, the "
        "model and the method, so changing only `sensitive_layers` or `weights` does not recalibrate.",
    )
    sensitive_layers: SensitiveLayers | None = Field(
        default=None,
        description="Layers kept at higher precision: fp32/fp16 are excluded from quantization (fp16 is "
        "converted only on targets that compute fp16, otherwise kept fp32 and reported), int16 uses 16-bit "
        "activations (same signedness as `activations`) with 8-bit weights.",
    )

    @model_validator(mode="after")
    def _ptq_needs_calibration(self) -> Quantization:
        if self.mode == "ptq" and self.calibration is None:
            raise ValueError("mode ptq needs a calibration section")
        return self


class Compile(_Strict):
    backend: str | None = Field(
        default=None, pattern=r"^[a-z0-9_-]+$", description="Backend override; default: the target's backend."
    )
    cores: PositiveInt | None = Field(
        default=None, le=64, description="NPU cores / core mask width / CPU threads, as the backend reads it."
    )
    batch: PositiveInt = Field(default=1, le=1024, description="Batch size compiled into the artifact.")
    optimization_level: int = Field(default=3, ge=0, le=3, description="0 (none) to 3 (all).")
    options: dict[str, Any] = Field(
        default_factory=dict, description="Backend-specific options, checked against that backend's schema."
    )


class Evaluate(_Strict):
    runner: str = Field(
        default="local", pattern=_RUNNER, description="local | ssh://user@host[:port] | adb://serial"
    )
    data: Annotated[str, SpecPath("folder", input="eval_data")] | None = Field(
        default=None, description="Folder of evaluation inputs, relative to the spec; default: random inputs."
    )
    labels: Annotated[str, SpecPath("file", input="labels")] | None = Field(
        default=None,
        description="Labels file, relative to the spec, by sample file name: `<file> <class>` lines "
        "(classification), `<file><TAB><text>` lines (ctc), JSON {file: [[x1, y1, x2, y2, class], ...]} (detection). With "
        "labels the task is measured against them; without, against the float model's decoded outputs.",
    )
    task: Task | None = Field(
        default=None,
        description="What the outputs mean, so accuracy is the application's measure: classification, "
        "detection, ctc, dense, tokens or regression. Evaluate, the auto sensitive-layer search and the SLOs all use "
        "it. None: integer labels imply classification; without labels the generic measure (map IoU for a "
        "single-channel map, else cosine to the float model), named as generic in every verdict.",
    )
    metric: Literal["top1", "top5", "fidelity"] = Field(
        default="top1",
        description="Without a task: the classification metric used with labels (fidelity ignores the "
        "labels). A task sets its own metric.",
    )
    warmup: NonNegativeInt = Field(default=10, le=10_000, description="Untimed runs first.")
    runs: PositiveInt = Field(default=100, le=100_000, description="Timed runs.")
    timeout_s: PositiveFloat = Field(
        default=600, le=MAX_TIMEOUT_S, description="Per-run timeout of the runner, seconds (finite)."
    )

    @field_validator("runner")
    @classmethod
    def _runner_url(cls, v: str) -> str:
        try:
            runner_url.parse(v)  # the port range and everything the pattern cannot say
        except runner_url.RunnerUrlError as exc:
            raise ValueError(str(exc)) from None
        return v


class LatencySLO(_Strict):
    p50: PositiveFloat | None = Field(default=None, description="Median latency bound, ms.")
    p90: PositiveFloat | None = Field(default=None, description="90th percentile bound, ms.")
    p95: PositiveFloat | None = Field(default=None, description="95th percentile bound, ms.")
    p99: PositiveFloat | None = Field(default=None, description="99th percentile bound, ms.")
    mean: PositiveFloat | None = Field(default=None, description="Mean latency bound, ms.")


class AccuracySLO(_Strict):
    min: float | None = Field(default=None, ge=0, le=1, description="Minimum task accuracy (0..1).")
    max_drop: float | None = Field(
        default=None, ge=0, le=1, description="Maximum drop from the float model, absolute unless `relative`."
    )
    relative: bool = Field(default=False, description="max_drop is a fraction of the float accuracy.")


class SLO(_Strict):
    latency_ms: LatencySLO | None = Field(default=None, description="Latency bounds in milliseconds.")
    accuracy: AccuracySLO | None = Field(default=None, description="Accuracy bounds.")
    size_mb: PositiveFloat | None = Field(default=None, description="Maximum artifact size, MB.")
    peak_memory_mb: PositiveFloat | None = Field(default=None, description="Maximum peak memory, MB.")
    npu_coverage: float | None = Field(
        default=None, ge=0, le=1, description="Minimum fraction of compute ops placed on the NPU."
    )
    max_fallback_partitions: NonNegativeInt | None = Field(
        default=None, description="Maximum number of CPU fallback partitions."
    )


class DeploymentSpec(_Strict):
    model: ModelRef = Field(..., description="The float ONNX model to deploy.")
    target: str = Field(..., description="A target id from the catalog (`npuctl targets`).")
    inputs: dict[str, Shape] = Field(
        ..., min_length=1, description="Every model input with a fully fixed shape."
    )
    shape_variants: list[dict[str, Shape]] = Field(
        default_factory=list,
        max_length=32,
        description="Extra fixed shapes; one artifact each, plus a manifest to pick one at run time.",
    )
    preprocess: Preprocess | None = Field(default=None, description="Preprocessing folded into the model.")
    rewrite: Rewrite = Field(default_factory=Rewrite, description="Graph rewrites and fusions.")
    quantization: Quantization = Field(default_factory=Quantization, description="Precision policy.")
    compile: Compile = Field(default_factory=Compile, description="Compiler options.")
    evaluate: Evaluate = Field(default_factory=Evaluate, description="How measurements are taken.")
    slo: SLO = Field(default_factory=SLO, description="Service-level objectives judged on measurements.")

    @field_validator("inputs")
    @classmethod
    def _input_names(cls, v: dict[str, list[int]]) -> dict[str, list[int]]:
        for name in v:
            if not name or len(name) > 256:
                raise ValueError(f"input name {name!r} must be 1-256 characters")
        return v

    @model_validator(mode="after")
    def _variants_name_known_inputs(self) -> DeploymentSpec:
        for i, variant in enumerate(self.shape_variants):
            unknown = sorted(set(variant) - set(self.inputs))
            if unknown:
                raise ValueError(f"shape_variants[{i}] names inputs not in `inputs`: {', '.join(unknown)}")
        return self


class Deployment(_Strict):
    """One deployment: a model, a target and the policies to get it there."""

    apiVersion: Literal["npuctl/v1"] = Field(..., description="Spec format version.")
    kind: Literal["Deployment"] = Field(..., description="Always Deployment.")
    extends: str | None = Field(
        default=None,
        description="Another spec file (relative) this one is deep-merged over; this file's values win.",
    )
    metadata: Metadata = Field(..., description="Name and labels.")
    spec: DeploymentSpec = Field(..., description="What to build and what it must achieve.")


def is_valid_name(name: str) -> bool:
    return re.match(_NAME, name) is not None
