"""The models the quantize stage builds: the prepared float model (opset raised, nodes named, ONNX
Runtime's quant_pre_process) and QDQ builds of it from the calibrated ranges (Builder)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.passes.quant import bias_correction, calibration
from backends.passes.quant.modes import save_deterministic
from backends.passes.quant.policy import Policy, int16_overrides, quant_type
from backends.sdk.errors import TerminalError, one_line

if TYPE_CHECKING:
    import onnx

Logger = Callable[[str], None]


# ---------------------------------------------------------------------------------------------- prepare


def _name_nodes(model: onnx.ModelProto) -> int:
    from backends.passes.facts import name_nodes

    return name_nodes(model)


def prepare(source: Path, scratch: Path, log: Logger) -> tuple[Path, dict[str, Any]]:
    """The model every calibration and build starts from: opset >= 13 (per-channel QDQ needs it), named
    nodes, and ONNX Runtime's quant_pre_process (shape inference, BatchNorm folding, constant folding)."""
    import onnx

    from backends.passes.importer import default_opset, raise_opset

    try:
        model = onnx.load(str(source))
    except Exception as exc:  # noqa: BLE001 - protobuf/onnx raise various types
        raise TerminalError(f"quantize: cannot load model: {one_line(exc)}") from exc
    report: dict[str, Any] = {"opset_before": default_opset(model)}
    model = raise_opset(model, log)
    report["opset"] = default_opset(model)
    report["renamed_nodes"] = _name_nodes(model)
    raised = scratch / "raised.onnx"
    save_deterministic(model, raised)
    prepared = scratch / "prepared.onnx"
    report["quant_pre_process"] = _pre_process(raised, prepared, log)
    model = onnx.load(str(prepared))
    renamed = _name_nodes(model)
    if renamed:
        report["renamed_nodes"] += renamed
    unshared = unshare_biases(model)
    if unshared:
        report["biases_unshared"] = unshared
    flattened = flatten_gemm_biases(model)
    if flattened:
        report["gemm_biases_flattened"] = flattened
    save_deterministic(model, prepared)
    report["nodes"] = len(model.graph.node)
    return prepared, report


def flatten_gemm_biases(model: onnx.ModelProto) -> list[str]:
    """Gemm biases given as a [1, N] initializer, rewritten as the [N] they broadcast the same as.
    quant_pre_process writes them so when it fuses MatMul + Add (a row vector added), and ONNX Runtime's
    quantizer reads a per-channel weight's bias one element per channel: a [1, N] bias makes it raise
    ("The truth value of an array ... is ambiguous", a jax2tf export). A bias another node also reads
    gets a copy of its own. Returns the Gemm nodes changed."""
    from onnx import numpy_helper

    initializers = {t.name: t for t in model.graph.initializer}
    readers: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    changed = []
    for node in model.graph.node:
        if node.op_type != "Gemm" or len(node.input) < 3 or node.input[2] not in initializers:
            continue
        bias = initializers[node.input[2]]
        if len(bias.dims) != 2 or bias.dims[0] != 1:
            continue
        flat = numpy_helper.from_array(numpy_helper.to_array(bias).reshape(-1), bias.name)
        if readers[bias.name] > 1:
            flat.name = f"{bias.name}_flat_{node.name}"
            model.graph.initializer.append(flat)
            initializers[flat.name] = flat
            node.input[2] = flat.name
        else:
            bias.CopyFrom(flat)
        changed.append(node.name)
    return changed


_BIASED = ("Conv", "ConvTranspose", "Gemm")


def unshare_biases(model: onnx.ModelProto) -> int:
    """Each Conv / ConvTranspose / Gemm reading a bias initializer another of them reads too gets a copy
    of its own, named after the node and unlike any tensor of the graph. ONNX Runtime's quantizer makes
    such a copy itself (each bias is quantized at its node's input scale) but names it `<bias><n>`,
    checking only initializers: tf2onnx names a Conv's output `<scope>/conv1d_25<n>` beside the shared
    bias `<scope>/conv1d_25`, and the copy took the output's name (basic-pitch: a Concat of rank-4 and
    rank-1 inputs). Returns the copies made."""
    import onnx

    initializers = {t.name: t for t in model.graph.initializer}
    taken = set(initializers) | {x for n in model.graph.node for x in [*n.input, *n.output]}
    taken |= {v.name for v in [*model.graph.input, *model.graph.output]}
    seen: set[str] = set()
    made = 0
    for node in model.graph.node:
        if node.op_type not in _BIASED or len(node.input) < 3 or node.input[2] not in initializers:
            continue
        bias = node.input[2]
        if bias not in seen:
            seen.add(bias)
            continue
        name, k = f"{bias}/for/{node.name}", 0
        while name in taken:
            k += 1
            name = f"{bias}/for/{node.name}/{k}"
        copy = onnx.TensorProto()
        copy.CopyFrom(initializers[bias])
        copy.name = name
        model.graph.initializer.append(copy)
        taken.add(name)
        node.input[2] = name
        made += 1
    return made


def _pre_process(raised: Path, prepared: Path, log: Logger) -> str:
    """ONNX Runtime's quant_pre_process; its symbolic shape inference fails on some exported graphs
    (PP-OCR cls: an AssertionError), so it is retried with ONNX shape inference alone before giving up."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    failures = []
    for label, skip_symbolic in (("applied", False), ("applied without symbolic shape inference", True)):
        try:
            quant_pre_process(str(raised), str(prepared), skip_symbolic_shape=skip_symbolic)
            return label
        except Exception as exc:  # noqa: BLE001 - ORT's optimizer and shape inference raise plain exceptions
            failures.append(one_line(exc))
            log(f"quant_pre_process ({label}) failed: {one_line(exc)}")
    shutil.copyfile(raised, prepared)
    return f"skipped: {'; '.join(failures)}"


def op_types_to_quantize() -> list[str]:
    """Every op type ONNX Runtime's QDQ quantizer handles (its own default), in a stable order."""
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    return sorted(set(QLinearOpsRegistry) | set(QDQRegistry))


# ------------------------------------------------------------------------------------------------ build


@dataclass
class Builder:
    """Builds QDQ models from the prepared model and the calibrated ranges, with some nodes kept."""

    prepared: Path
    ranges: Path
    policy: Policy
    scratch: Path
    op_types: list[str]
    placed_float: Sequence[str] = ()
    """Nodes the placement leaves float in every build (the tail, mixed-range concats)."""
    placed_wide: Sequence[str] = ()
    """Tensors the placement quantizes at 16 bits in every build (mixed-range concats, integer targets)."""
    shifts: Sequence[bias_correction.Shift] = ()
    """Measured bias shifts every build gets (backends.passes.quant.bias_correction), once measured."""
    counter: int = 0
    corrected: int = 0
    """Layers whose bias the last build corrected."""
    _uncorrected: dict[tuple[Any, ...], Path] = field(default_factory=dict)
    """Builds made before any shift was measured, by their arguments: a later build with the same
    arguments is that file with the shifts applied, not a second run of the quantizer (the artifact
    of a spec without a search is the very build bias correction measured)."""

    def build(
        self,
        float_nodes: Iterable[str] = (),
        int16_nodes: Iterable[str] = (),
        out: Path | None = None,
        explicit_activations: bool = False,
        wide_tensors: Iterable[str] = (),
    ) -> Path:
        """`explicit_activations` keeps Relu/Clip nodes the quantizer would fold into Q ranges (same numbers):
        the sensitivity search bypasses Q/DQ pairs, which would otherwise drop their clipping."""
        import onnx

        self.counter += 1
        target = out or self.scratch / f"build-{self.counter}.onnx"
        wide = sorted(set(int16_nodes))
        args = (
            tuple(sorted(set(float_nodes))),
            tuple(wide),
            explicit_activations,
            tuple(sorted({*wide_tensors, *self.placed_wide})),
        )
        built = self._uncorrected.get(args)
        if built is None:
            self._quantize(args, target)
            if not self.shifts:
                self._uncorrected[args] = target
            built = target
        model = onnx.load(str(built))
        self.corrected = bias_correction.apply(model, self.shifts)
        save_deterministic(model, target)
        return target

    def _quantize(self, args: tuple[Any, ...], target: Path) -> None:
        """ONNX Runtime's quantize_static of the prepared model with `args` (see build) into `target`."""
        import onnx
        from onnxruntime.quantization import QuantFormat, quantize_static

        float_nodes, wide, explicit_activations, wide_tensors = args
        extra: dict[str, Any] = {
            "ActivationSymmetric": self.policy.activation_symmetric,
            "WeightSymmetric": self.policy.weight_symmetric,
        }
        if explicit_activations:
            extra["QDQKeepRemovableActivations"] = True
        if wide or wide_tensors:
            model = onnx.load(str(self.prepared))
            overrides = int16_overrides(model, wide, self.policy.wide_activations)
            qtype = [{"quant_type": quant_type(self.policy.wide_activations)}]
            overrides.update({t: list(qtype) for t in wide_tensors})
            extra["TensorQuantOverrides"] = dict(sorted(overrides.items()))
        if self.policy.backend_options:
            _merge_backend_options(extra, self.policy.backend_options, self.prepared)
        try:
            quantize_static(
                str(self.prepared),
                str(target),
                None,
                quant_format=QuantFormat.QDQ,
                op_types_to_quantize=self.op_types,
                per_channel=self.policy.per_channel,
                reduce_range=self.policy.reduce_range,
                activation_type=quant_type(self.policy.activations),
                weight_type=quant_type(self.policy.weights),
                nodes_to_exclude=sorted(set(float_nodes) | set(self.placed_float)),
                calibrate_method=calibration.ort_method(self.policy.method),
                extra_options=extra,
                calibration_cache_path=str(self.ranges),
            )
        except TerminalError:
            raise
        except Exception as exc:  # noqa: BLE001 - ORT's quantizer raises plain exceptions
            raise TerminalError(f"quantization failed: {one_line(exc)}") from exc


def _merge_backend_options(extra: dict[str, Any], options: Mapping[str, Any], prepared: Path) -> None:
    """A backend's extra_options under the spec's: its tensor overrides only for tensors the prepared
    model still has (quant_pre_process folds some away), the spec's int16 keeps winning."""
    import onnx

    for key, value in options.items():
        if key != "TensorQuantOverrides":
            extra.setdefault(key, value)
            continue
        model = onnx.load(str(prepared), load_external_data=False)
        names = {t for n in model.graph.node for t in (*n.input, *n.output)}
        names |= {t.name for t in model.graph.initializer}
        kept = {k: v for k, v in dict(value).items() if k in names}
        extra[key] = {**kept, **extra.get(key, {})}
