"""Target-aware quantization policy: the spec's `quantization` section resolved against the catalog.

Every default that depends on the target is decided here, once, and reported: the activation type
follows the target (uint8 on the x86 host CPU, where int8 activations ran about 2x slower than fp32
under ONNX Runtime; uint8/uint16 on Qualcomm HTP; int8 on RKNN), symmetric ranges follow the
signedness of the type, and sensitive-layer rules are matched against the graph here so that a rule
matching nothing fails before any calibration work.

The defaults of the spec's `quantization` section are the defaults of the dataclasses below (and
CALIBRATION_SAMPLES): the spec models read theirs from here, so the spec and a backend reading a section
without a field agree on its value.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from backends.catalog import Target
from backends.sdk.errors import TerminalError

if TYPE_CHECKING:
    import onnx
    from onnxruntime.quantization import QuantType

Mode = Literal["none", "fp16", "ptq", "qat"]
IntType = Literal["int8", "uint8", "int16", "uint16"]
Method = Literal["minmax", "entropy", "percentile"]
Keep = Literal["fp16", "fp32", "int16"]
Placement = Literal["target", "every_op"]
"""The choices of the spec's `quantization` fields (the spec models declare their fields with these)."""

INT_TYPES: tuple[str, ...] = get_args(IntType)
FLOAT_KEEPS: tuple[str, ...] = ("fp16", "fp32")

COMPUTE_OPS: frozenset[str] = frozenset(
    {"Conv", "ConvTranspose", "MatMul", "Gemm", "Attention", "LSTM", "GRU", "RNN", "Einsum"}
)
"""Op types that count as a "layer" for first/last rules, auto sensitivity and the qat coverage check."""

_WIDE: dict[str, str] = {"int8": "int16", "uint8": "uint16", "int16": "int16", "uint16": "uint16"}

MIN_OPSET = 13
"""Per-channel QDQ needs DequantizeLinear's `axis` attribute (opset 13); older models are raised first."""


CALIBRATION_SAMPLES = 100
"""Calibration samples drawn when the spec's calibration section names no count."""


@dataclass(frozen=True)
class AutoBudget:
    max_accuracy_drop: float = 0.005
    max_layers: int = 8


@dataclass(frozen=True)
class SensitiveRules:
    keep: Keep = "fp16"
    nodes: tuple[str, ...] = ()
    op_types: tuple[str, ...] = ()
    first: int = 0
    last: int = 0
    auto: AutoBudget | None = None

    @property
    def explicit(self) -> bool:
        return bool(self.nodes or self.op_types or self.first or self.last)


@dataclass(frozen=True)
class Policy:
    """The resolved settings one quantize run uses; `describe()` is what the report shows."""

    mode: Mode = "none"
    weights: IntType = "int8"
    activations: str = "uint8"
    activations_from: str = "spec"
    per_channel: bool = True
    activation_symmetric: bool = False
    weight_symmetric: bool = True
    reduce_range: bool = False
    """7-bit weights: set for a host whose int8 kernels clip 8-bit products' pair sums (backends.sdk.host)."""
    host_kernels: bool = False
    """Set by a target that runs this host's ONNX Runtime kernels (the host CPU): the int8 model is scored
    as its artifact runs, by the fused integer kernels, not by its Q/DQ math (backends.passes.accuracy)."""
    method: Method = "minmax"
    percentile: float = 99.999
    samples: int = 0
    """0: no calibration section (nothing is calibrated)."""
    seed: int = 0
    keep_io_types: bool = True
    placement: Placement = "target"
    """target: Q/DQ where the target runs integer ops (backends.passes.quant.qdq_placement); every_op: ORT's default."""
    integer_graph: bool = False
    bias_correction: bool = True
    """Each quantized layer's mean output shift folded into its bias (backends.passes.quant.bias_correction)."""
    """Set by a backend whose compiled graph runs wholly in integer (QNN HTP): no float tail."""
    sensitive: SensitiveRules | None = None
    notes: tuple[str, ...] = field(default=())
    backend_options: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """quantize_static extra_options a backend adds (QNN's QDQ config); the spec's own settings win."""

    @property
    def wide_activations(self) -> str:
        """The 16-bit activation type int16 keeps use: same signedness as the 8-bit one."""
        return _WIDE[self.activations]

    def describe(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "weights": self.weights,
            "activations": self.activations,
            "activations_from": self.activations_from,
            "per_channel": self.per_channel,
            "symmetric": {"activations": self.activation_symmetric, "weights": self.weight_symmetric},
            "method": self.method,
            **({"percentile": self.percentile} if self.method == "percentile" else {}),
            "seed": self.seed,
            "placement": self.placement,
            "bias_correction": self.bias_correction,
            **({"reduce_range": True} if self.reduce_range else {}),
            **({"scored_on": "host int8 kernels"} if self.host_kernels else {}),
        }


def resolve(config: Mapping[str, Any], target: Target) -> Policy:
    """The policy for `config["quantization"]` (JSON of the spec section) on `target`."""
    section: Mapping[str, Any] = config.get("quantization") or {}
    mode: Mode = section.get("mode", Policy.mode)
    notes: list[str] = []
    activations = section.get("activations")
    activations_from = "spec"
    if activations is None:
        known = target.default_activation in INT_TYPES
        activations = target.default_activation if known else Policy.activations
        activations_from = f"target {target.id} default"
    weights: IntType = section.get("weights", Policy.weights)
    symmetric = section.get("symmetric")
    act_symmetric = activations.startswith("int") if symmetric is None else bool(symmetric)
    calibration: Mapping[str, Any] = section.get("calibration") or {}
    policy = Policy(
        mode=mode,
        weights=weights,
        activations=str(activations),
        activations_from=activations_from,
        per_channel=bool(section.get("per_channel", Policy.per_channel)),
        activation_symmetric=act_symmetric,
        weight_symmetric=weights.startswith("int"),
        method=calibration.get("method", Policy.method),
        percentile=float(calibration.get("percentile", Policy.percentile)),
        samples=int(calibration.get("samples", CALIBRATION_SAMPLES)) if calibration else Policy.samples,
        seed=int(calibration.get("seed", Policy.seed)),
        keep_io_types=bool(section.get("keep_io_types", Policy.keep_io_types)),
        placement=section.get("placement", Policy.placement),
        bias_correction=bool(section.get("bias_correction", Policy.bias_correction)),
        sensitive=_rules(section.get("sensitive_layers")),
        notes=tuple(notes),
    )
    if mode == "ptq":
        check_supported(policy, target)
    return policy


def _rules(raw: Mapping[str, Any] | None) -> SensitiveRules | None:
    """The sensitive-layer rules; a section given empty (`auto: {}`) holds its defaults, as in the spec."""
    if raw is None:
        return None
    auto = raw.get("auto")
    budget = (
        AutoBudget(
            float(auto.get("max_accuracy_drop", AutoBudget.max_accuracy_drop)),
            int(auto.get("max_layers", AutoBudget.max_layers)),
        )
        if auto is not None
        else None
    )
    return SensitiveRules(
        keep=raw.get("keep", SensitiveRules.keep),
        nodes=tuple(raw.get("nodes") or ()),
        op_types=tuple(raw.get("op_types") or ()),
        first=int(raw.get("first", SensitiveRules.first)),
        last=int(raw.get("last", SensitiveRules.last)),
        auto=budget,
    )


def calibration_folder(inputs: Mapping[str, Path]) -> Path:
    """The calibration folder of a ptq run (the stage input `calibration_data`). The spec refuses ptq
    without a calibration section, so this fails only for a request built by hand; every quantizer
    asks here, so the error reads the same from each."""
    folder = inputs.get("calibration_data")
    if folder is None:
        raise TerminalError("quantization.calibration.data: ptq needs a calibration folder")
    return Path(folder)


def has_float(target: Target) -> bool:
    return any(p in target.precisions for p in ("fp32", "fp16", "bf16"))


def float_on_fallback(target: Target) -> bool:
    """True when float layers the NPU cannot run execute on the target's CPU fallback (an Ethos-U's
    Cortex-M): a float keep is then possible, at the CPU's speed."""
    return str(target.extra.get("fallback", "none")).startswith("cpu")


def check_supported(policy: Policy, target: Target) -> None:
    """TerminalError when the target cannot run the requested integer types or the sensitive keep."""
    precisions = set(target.precisions)
    for what, kind in (("weights", policy.weights), ("activations", policy.activations)):
        if kind not in precisions:
            raise TerminalError(
                f"quantization.{what}: target {target.id} does not support {kind} "
                f"(its precisions: {', '.join(target.precisions)})"
            )
    rules = policy.sensitive
    if rules is None:
        return
    if rules.keep == "int16" and policy.wide_activations not in precisions:
        raise TerminalError(
            f"quantization.sensitive_layers.keep: target {target.id} has no {policy.wide_activations} "
            f"activations (its precisions: {', '.join(target.precisions)})"
        )
    if rules.keep in FLOAT_KEEPS and not has_float(target) and not float_on_fallback(target):
        raise TerminalError(
            f"quantization.sensitive_layers.keep: target {target.id} runs no float layers "
            f"(its precisions: {', '.join(target.precisions)}); use keep: int16"
        )


def quant_type(kind: str) -> QuantType:
    """The ONNX Runtime QuantType for a spec type name."""
    from onnxruntime.quantization import QuantType

    return {
        "int8": QuantType.QInt8,
        "uint8": QuantType.QUInt8,
        "int16": QuantType.QInt16,
        "uint16": QuantType.QUInt16,
    }[kind]


def compute_nodes(model: onnx.ModelProto) -> list[str]:
    """Names of the compute layers (Conv, MatMul, Gemm, ...) in graph order."""
    return [n.name for n in model.graph.node if n.op_type in COMPUTE_OPS]


def spec_name(node: str) -> str:
    """The name a spec gives `node`: ONNX Runtime's pre-processing names a node it fused after the one
    it kept ("p2o.MatMul.0/MatMulAddFusion" for a MatMul and its Add), a name the user's model never
    had; a spec names the node it came from."""
    head, _, last = node.rpartition("/")
    return head if head and last.endswith("Fusion") else node


def match_rules(model: onnx.ModelProto, rules: SensitiveRules) -> dict[str, str]:
    """node name -> the rule that keeps it (first matching rule wins). A rule matching nothing is an error."""
    nodes = list(model.graph.node)
    kept: dict[str, str] = {}

    def add(names: Iterable[str], rule: str) -> None:
        matched = False
        for name in names:
            matched = True
            kept.setdefault(name, rule)
        if not matched:
            raise TerminalError(f"quantization.sensitive_layers.{rule} matches no node of the model")

    for i, pattern in enumerate(rules.nodes):
        add(
            (
                n.name
                for n in nodes
                if pattern in (n.name, spec_name(n.name))
                or fnmatch.fnmatchcase(n.name, pattern)
                or fnmatch.fnmatchcase(spec_name(n.name), pattern)
            ),
            f"nodes[{i}] {pattern!r}",
        )
    for i, op_type in enumerate(rules.op_types):
        add((n.name for n in nodes if n.op_type == op_type), f"op_types[{i}] {op_type!r}")
    compute = compute_nodes(model)
    if rules.first:
        add(compute[: rules.first], f"first {rules.first}")
    if rules.last:
        add(compute[-rules.last :], f"last {rules.last}")
    return kept


def int16_overrides(
    model: onnx.ModelProto, node_names: Sequence[str], wide: str, weight_inputs: Iterable[str] = ()
) -> dict[str, list[dict[str, Any]]]:
    """TensorQuantOverrides putting every activation tensor a kept node reads or writes at 16 bits.

    Weights (initializers) stay at the weight type: 16-bit activations with 8-bit weights is what
    Qualcomm HTP runs natively and what recovered PP-OCR det's text map in toolchain-notes.md.
    """
    qtype = quant_type(wide)
    constants = {t.name for t in model.graph.initializer} | set(weight_inputs)
    wanted = set(node_names)
    out: dict[str, list[dict[str, Any]]] = {}
    for node in model.graph.node:
        if node.name not in wanted:
            continue
        for tensor in (*node.input, *node.output):
            if tensor and tensor not in constants:
                out[tensor] = [{"quant_type": qtype}]
    return dict(sorted(out.items()))
