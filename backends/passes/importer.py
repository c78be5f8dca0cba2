"""The import stage: any ONNX file in, a checked, opset-normalized, statically shaped ONNX model out.

Every later stage (op placement, quantization, NPU compilers) needs static shapes and opset >= 13
(per-channel DequantizeLinear needs its `axis` attribute), so those are fixed here, once, with onnx
alone. External data is refused rather than inlined: the build key hashes the model file only, so
weights living in side files could change without the key noticing.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.passes.shape_fix import fix_input_shapes, infer_shapes, is_fixed
from backends.sdk.base import StageLog, StageOutput, StageRequest
from backends.sdk.errors import TerminalError, one_line

if TYPE_CHECKING:
    import onnx

Logger = Callable[[str], None]

MIN_OPSET = 13
"""Opsets below this are raised to exactly this (the smallest change that gives per-channel QDQ)."""

_DEFAULT_DOMAINS = ("", "ai.onnx")


def dist_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "missing"


class ImportPass:
    """Stage "import": load, check, raise the opset, fix input shapes, infer the rest."""

    stage = "import"

    def fingerprint(self) -> dict[str, str]:
        return {"onnx": dist_version("onnx")}

    def run(self, request: StageRequest) -> StageOutput:
        source = request.inputs.get("model")
        if source is None:
            raise TerminalError("import: no model file given")
        shapes = _spec_shapes(request.config.get("inputs"))
        log = StageLog(request.log)
        pieces, report = import_model(Path(source), shapes, log, as_bytes=True)
        out = Path(request.workdir) / "model.onnx"
        with out.open("wb") as fh:
            for piece in pieces:
                fh.write(piece)
        report["size_bytes"] = sum(len(piece) for piece in pieces)
        log(json.dumps(report, indent=1, sort_keys=True))
        note = f"opset {report['opset']['before']} -> {report['opset']['after']}"
        for line in report.get("redeclared_inputs", []):
            note += f"; input {line} (re-declared by the spec)"
        return StageOutput(artifacts={"model": out}, report=report, note=note)


def _spec_shapes(raw: Any) -> dict[str, list[int]]:
    if not isinstance(raw, Mapping) or not raw:
        raise TerminalError("import: spec.inputs must name every model input with its shape")
    shapes: dict[str, list[int]] = {}
    for name, shape in raw.items():
        if not isinstance(shape, Sequence) or not all(isinstance(d, int) and d > 0 for d in shape):
            raise TerminalError(
                f"import: spec.inputs.{name} must be a list of positive integers, got {shape!r}"
            )
        shapes[str(name)] = [int(d) for d in shape]
    return shapes


def import_model(
    path: Path, shapes: Mapping[str, Sequence[int]], log: Logger = print, as_bytes: bool = False
) -> tuple[Any, dict[str, Any]]:
    """The imported model and its report (`as_bytes`: its deterministic serialization, as pieces to
    write in order, instead of the proto). Every failure is a TerminalError with one line."""
    from backends.passes.facts import name_nodes
    from backends.passes.graph_rules import graph_problems

    model = load_model(path)
    problems = graph_problems(model)
    if problems:
        raise TerminalError(f"{path.name}: {problems[0]}")
    opset_before, ir_before = default_opset(model), model.ir_version
    weights = detach_weights(model)  # the passes below copy the model: without its weights, cheaply
    if weights:  # a parsed proto keeps the whole file's buffer alive: keep only the light model
        model = type(model).FromString(model.SerializeToString())
    _check(model, full=False, what=f"{path.name} fails onnx.checker")
    renamed = name_nodes(model)  # before any conversion, by the rule spec validation uses too
    model = raise_opset(model, log)
    removed = drop_initializer_inputs(model)
    redeclared = fix_input_shapes(model, shapes)
    for line in redeclared:
        log(f"input {line}: the spec re-declares the model's fixed dims; the graph is checked at them")
    model.ir_version = max(model.ir_version, _min_ir_version(model))
    try:
        model = infer_shapes(model, log)
    except TerminalError as exc:
        if not redeclared:
            raise
        raise TerminalError(f"{exc} (the spec re-declared {'; '.join(redeclared)})") from exc
    _check(model, full=True, what="the imported model fails onnx.checker (full check)")
    if as_bytes:
        report = _report(model, opset_before, ir_before, renamed, removed, redeclared)
        pieces = _serialized(model, weights)
        if redeclared:
            _runs_at(b"".join(pieces), model, redeclared)
        return pieces, report
    attach_weights(model, weights)
    if redeclared:
        _runs_at(model.SerializeToString(), model, redeclared)
    return model, _report(model, opset_before, ir_before, renamed, removed, redeclared)


def _serialized(model: onnx.ModelProto, weights: dict[str, tuple[bytes, bool]]) -> list[bytes]:
    """The imported model's deterministic bytes, the detached weights spliced in (backends.passes.skim):
    the model's weights are then held once, not in a proto and again in its serialization."""
    from backends.passes.skim import with_weights

    for tensor in model.graph.initializer:
        if tensor.name in weights:
            del tensor.external_data[:]
            tensor.ClearField("data_location")
            if weights[tensor.name][1]:
                tensor.data_location = 0
    light = model.SerializeToString(deterministic=True)
    return with_weights(light, {name: data for name, (data, _) in weights.items()})


def _runs_at(serialized: bytes, model: onnx.ModelProto, redeclared: list[str]) -> None:
    """One run on zeros of a model whose inputs the spec re-declared: shape inference does not check
    everything a kernel does (a convolution's input channels against its weights), ONNX Runtime does."""
    import numpy as np
    import onnxruntime as ort

    from backends.passes.data import model_inputs

    feed = {spec.name: np.zeros(spec.shape, spec.dtype) for spec in model_inputs(model)}
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 4
        session = ort.InferenceSession(serialized, options, providers=["CPUExecutionProvider"])
        session.run(None, feed)
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime raises its own types
        raise TerminalError(
            f"the model does not run at the spec's input shapes ({'; '.join(redeclared)}, re-declared by "
            f"the spec): {one_line(exc)}"
        ) from exc


def _report(
    model: onnx.ModelProto,
    opset_before: int | None,
    ir_before: int,
    renamed: int,
    removed: int,
    redeclared: list[str],
) -> dict[str, Any]:
    report = describe(model)
    report["opset"] = {"before": opset_before, "after": default_opset(model)}
    report["ir_version"] = {"before": ir_before, "after": model.ir_version}
    report["removed_initializer_inputs"] = removed
    report["external_data"] = "refused"
    report["named_nodes"] = renamed
    if redeclared:
        report["redeclared_inputs"] = redeclared
    return report


def load_model(path: Path) -> onnx.ModelProto:
    """Parses the file; a corrupt or non-ONNX file, or one with external data, is a TerminalError."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TerminalError(f"cannot read model {path}: {one_line(exc)}") from exc
    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise TerminalError(f"{path.name} is not an ONNX model: {one_line(exc)}") from exc
    if model.ir_version <= 0 or not model.HasField("graph") or not model.graph.output:
        raise TerminalError(f"{path.name} is not an ONNX model: no IR version or graph outputs")
    external = sorted(_external_tensors(model))
    if external:
        raise TerminalError(
            f"{path.name} keeps {len(external)} tensors in external data (first: {external[0]}); npuctl needs "
            "a self-contained model, because only the model file's bytes enter the build key: re-save it "
            "with onnx.save(model, path, save_as_external_data=False)"
        )
    return model


def _external_tensors(model: onnx.ModelProto) -> Iterable[str]:
    import onnx

    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            yield tensor.name
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.HasField("t") and attr.t.data_location == onnx.TensorProto.EXTERNAL:
                yield f"{node.name or node.op_type}.{attr.name}"


DETACH_BYTES = 1 << 20
"""Initializers larger than this are held outside the proto while the import passes run."""
_DETACHED = "npuctl-detached-weights.bin"


def detach_weights(model: onnx.ModelProto) -> dict[str, tuple[bytes, bool]]:
    """Moves the raw data of large initializers out of the model, marking them external.

    Every onnx pass here (checker, version converter, shape inference) serializes and copies the
    whole model; a 1 GB model made them peak at several GB. They read the weights' dims, never their
    bytes, so the bytes wait outside (each copied once, the proto's copy released) and come back in
    `attach_weights`.
    """
    import onnx

    out: dict[str, tuple[bytes, bool]] = {}
    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.DEFAULT and len(tensor.raw_data) > DETACH_BYTES:
            out[tensor.name] = (tensor.raw_data, tensor.HasField("data_location"))
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL
            entry = tensor.external_data.add()
            entry.key, entry.value = "location", _DETACHED
    return out


def attach_weights(model: onnx.ModelProto, weights: dict[str, tuple[bytes, bool]]) -> None:
    """The weights back in place, the tensors as they were (a proto2 field set to its default is
    still written, so `data_location` is set again only where the source had it)."""
    for tensor in model.graph.initializer:
        found = weights.pop(tensor.name, None)
        if found is not None:
            data, had_location = found
            del tensor.external_data[:]
            tensor.ClearField("data_location")
            if had_location:
                tensor.data_location = 0
            tensor.raw_data = data
    if weights:
        raise TerminalError(f"import: initializers lost in conversion: {', '.join(sorted(weights))}")


def _check(model: onnx.ModelProto, full: bool, what: str) -> None:
    """onnx.checker; a model with detached weights is checked from a file beside an empty stand-in
    for them (the checker only asks that external data exist, never reads it)."""
    import tempfile

    import onnx

    detached = any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    try:
        if not detached:
            onnx.checker.check_model(model, full_check=full)
            return
        with tempfile.TemporaryDirectory(prefix="npuctl-check-") as folder:
            (Path(folder) / _DETACHED).write_bytes(b"")
            light = Path(folder) / "model.onnx"
            light.write_bytes(model.SerializeToString())
            onnx.checker.check_model(str(light), full_check=full)
    except Exception as exc:  # ValidationError, InferenceError and C++ errors: all the model's fault
        raise TerminalError(f"{what}: {one_line(exc)}") from exc


def default_opset(model: onnx.ModelProto) -> int | None:
    for entry in model.opset_import:
        if entry.domain in _DEFAULT_DOMAINS:
            return int(entry.version)
    return None


def raise_opset(model: onnx.ModelProto, log: Logger = print) -> onnx.ModelProto:
    """Converts a default-domain opset below MIN_OPSET to exactly MIN_OPSET with onnx.version_converter."""
    import onnx.version_converter

    current = default_opset(model)
    if current is None or current >= MIN_OPSET:
        return model
    log(f"raising opset {current} -> {MIN_OPSET}")
    try:
        return onnx.version_converter.convert_version(model, MIN_OPSET)
    except Exception as exc:  # the converter raises its own C++ error types
        raise TerminalError(f"cannot convert opset {current} to {MIN_OPSET}: {one_line(exc)}") from exc


def drop_initializer_inputs(model: onnx.ModelProto) -> int:
    """Removes graph inputs that are initializers (IR < 4 style): they are weights, not inputs."""
    weights = {init.name for init in model.graph.initializer}
    keep = [inp for inp in model.graph.input if inp.name not in weights]
    removed = len(model.graph.input) - len(keep)
    if removed:
        del model.graph.input[:]
        model.graph.input.extend(keep)
    return removed


def _min_ir_version(model: onnx.ModelProto) -> int:
    import onnx.helper

    # IR 4 is the first that lets initializers live outside the graph inputs.
    return max(4, onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True))


def _dtype_name(elem_type: int) -> str:
    import onnx

    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError):
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def _io(values: Iterable[Any]) -> list[dict[str, Any]]:
    out = []
    for value in values:
        tensor_type = value.type.tensor_type
        dims = [d.dim_value if is_fixed(d) else None for d in tensor_type.shape.dim]
        out.append({"name": value.name, "dtype": _dtype_name(tensor_type.elem_type), "shape": dims})
    return out


def _parameter_count(model: onnx.ModelProto) -> int:
    total = 0
    for tensor in model.graph.initializer:
        count = 1
        for dim in tensor.dims:
            count *= int(dim)
        total += count
    for node in model.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.HasField("t"):
                    count = 1
                    for dim in attr.t.dims:
                        count *= int(dim)
                    total += count
    return total


def describe(model: onnx.ModelProto) -> dict[str, Any]:
    """Inputs, outputs, node count, op histogram (sorted) and parameter count."""
    ops = Counter(
        node.op_type if node.domain in _DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"
        for node in model.graph.node
    )
    return {
        "inputs": _io(model.graph.input),
        "outputs": _io(model.graph.output),
        "nodes": len(model.graph.node),
        "ops": dict(sorted(ops.items())),
        "parameters": _parameter_count(model),
    }
