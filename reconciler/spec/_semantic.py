"""Semantic checks: what a schema cannot see, checked against the files and the real ONNX graph.

Data paths (the path fields declared on the spec models) must stay inside the repository and exist,
and a data folder must hold samples itself; what the target's backend needs and the schema leaves
optional (backends.sdk.base.SpecNeed) must be set; compile options must match the backend's schema;
the model file must exist (inside the repository or the installed package that ships it), match its
sha256 pin, and agree with the spec: input names and ranks, every dynamic dimension fixed and every
fixed one matching, the preprocess input, every sensitive-layer or rewrite-exclusion rule matching at
least one node, labels the declared evaluate.task can read, and a quantization mode that fits a model
that arrives already quantized.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path

from backends.passes.quantized import quantized
from backends.sdk import pathpolicy
from reconciler.spec._errors import SpecError, SpecErrors
from reconciler.spec._load import LoadedSpec
from reconciler.spec._needs import need_errors
from reconciler.spec._options import backend_spec_errors, options_errors
from reconciler.spec._paths import data_members, model_file, resolve_path
from reconciler.spec._suggest import did_you_mean, suggest
from reconciler.spec._summary import Dim, ModelError, ModelSummary, sha256_file, summary
from reconciler.spec.pathfields import named


def semantic_errors(spec: LoadedSpec, root: Path) -> list[SpecError]:
    """Every semantic problem of a schema-valid spec (empty when it can be built)."""
    return ordered(spec, data_errors(spec, root) + model_errors(spec, root))


def ordered(spec: LoadedSpec, errors: list[SpecError]) -> list[SpecError]:
    return sorted(errors, key=lambda e: (e.file != spec.path, *e.sort_key()))


def model_errors(spec: LoadedSpec, root: Path) -> list[SpecError]:
    """The checks against the model, the backends and the task: while the spec and the model file are
    unchanged, their outcome is too (reconciler.spec._cache keeps a pass)."""
    errors = options_errors(spec) + backend_spec_errors(spec) + need_errors(spec) + _task_errors(spec)
    try:
        path = model_file(spec, root)
    except SpecErrors as exc:
        return errors + exc.errors
    try:
        graph = summary(path, root)
    except ModelError as exc:
        return [*errors, spec.error("model.path", f"{exc} ({path})")]
    except OSError as exc:
        return [*errors, spec.error("model.path", f"cannot read the model: {exc.strerror or exc}")]
    errors += [
        spec.error("model.path", f"{problem} ({path.name}): the import stage refuses it")
        for problem in graph.problems
    ]
    errors += _pin_errors(spec, path)
    errors += _input_errors(spec, graph)
    errors += _preprocess_errors(spec, graph)
    errors += _mask_errors(spec, graph)
    errors += _rule_errors(spec, graph)
    errors += _quantized_errors(spec, graph)
    return errors


Passed = set[tuple[Path, str, str]]
"""(the spec's folder, the relative path, its kind) found in order: a pass over many specs that name
one data folder checks it once (the caller keeps the set for one pass only)."""


def data_errors(spec: LoadedSpec, root: Path, passed: Passed | None = None) -> list[SpecError]:
    """Every path field the spec sets must name a file or folder (its declared kind) inside the
    repository; a path that may be package-relative (the model) is checked with the model."""
    errors: list[SpecError] = []
    for field, relative in named(spec.spec_json):
        if field.package is not None:
            continue
        dotted, kind = field.dotted, field.kind
        seen = (spec.path.parent, str(relative), kind)
        if passed is not None and seen in passed:
            continue
        before = len(errors)
        try:
            path = resolve_path(spec, relative, root, dotted)
        except SpecErrors as exc:
            errors += exc.errors
            continue
        exists = path.is_dir() if kind == "folder" else path.exists()
        if not exists:
            errors.append(spec.error(dotted, f"{kind} not found: {path}"))
            continue
        try:
            if kind == "folder":
                errors += _sample_errors(spec, data_members(spec, path, root, dotted), path, dotted)
            else:
                pathpolicy.require_regular(path)
        except SpecErrors as exc:
            errors += exc.errors
        except pathpolicy.PathRefused as exc:
            errors.append(spec.error(dotted, str(exc)))
        if passed is not None and len(errors) == before:
            passed.add(seen)
    return errors


def _sample_errors(spec: LoadedSpec, members: list[Path], folder: Path, dotted: str) -> list[SpecError]:
    """A data folder must hold sample files itself: the stages read no subfolder."""
    from backends.passes.data import SAMPLE_SUFFIXES, no_samples

    if any(m.suffix.lower() in SAMPLE_SUFFIXES for m in members):
        return []
    return [spec.error(dotted, f"folder {no_samples(folder)}")]


def _task_errors(spec: LoadedSpec) -> list[SpecError]:
    """Labels the declared task cannot read: dense maps and regression outputs are measured against the
    float model; text labels of a ctc task need the charset that maps classes to characters."""
    task = spec.field("evaluate.task")
    if task is None:
        return []
    if task.get("type") == "ctc" and task.get("case_sensitive") is False and task.get("charset") is None:
        return [
            spec.error(
                "evaluate.task.case_sensitive",
                "case folding compares characters: set evaluate.task.charset (class indices have no case)",
            )
        ]
    if spec.field("evaluate.labels") is None:
        return []
    if task.get("type") in ("dense", "tokens", "regression"):
        return [
            spec.error(
                "evaluate.labels",
                f"a {task['type']} task is measured against the float model's outputs; remove the labels",
            )
        ]
    if task.get("type") == "ctc" and task.get("charset") is None:
        return [
            spec.error("evaluate.task", "text labels need evaluate.task.charset to map classes to characters")
        ]
    return []


def _pin_errors(spec: LoadedSpec, path: Path) -> list[SpecError]:
    """The file's digest, only for a pinned spec: the shared streaming sha256 (reconciler.state.digest)
    that the engine's key then reuses, so the model is still read once."""
    pin = spec.field("model.sha256")
    if pin is None:
        return []
    actual = sha256_file(path)
    if pin == actual:
        return []
    return [spec.error("model.sha256", f"pin does not match the model file, whose sha256 is {actual}")]


def _fmt(dims: tuple[Dim, ...] | list[int]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _input_errors(spec: LoadedSpec, graph: ModelSummary) -> list[SpecError]:
    errors: list[SpecError] = []
    names = [i.name for i in graph.inputs]
    shapes = spec.deployment.spec.inputs
    for name, shape in shapes.items():
        info = graph.input(name)
        if info is None:
            message = f"the model has no input {name!r}{suggest(name, names, 'its inputs')}"
            errors.append(spec.error(f"inputs.{name}", message, key=True))
        else:
            errors += _shape_errors(spec, f"inputs.{name}", name, shape, info.dims)
    for info in graph.inputs:
        if info.name not in shapes:
            dynamic = sum(1 for d in info.dims if not isinstance(d, int))
            why = f"; {dynamic} of its dimensions are dynamic and need a value" if dynamic else ""
            message = f"model input {info.name!r} {_fmt(info.dims)} needs a fixed shape here{why}"
            errors.append(spec.error("inputs", message, key=True))
    for index, variant in enumerate(spec.deployment.spec.shape_variants):
        for name, shape in variant.items():
            found = graph.input(name)
            if found is not None:
                errors += _shape_errors(spec, f"shape_variants.{index}.{name}", name, shape, found.dims)
    return errors


def _shape_errors(
    spec: LoadedSpec, dotted: str, name: str, shape: list[int], dims: tuple[Dim, ...]
) -> list[SpecError]:
    if len(shape) != len(dims):
        message = f"rank {len(shape)}, but model input {name!r} has rank {len(dims)}: {_fmt(dims)}"
        return [spec.error(dotted, message)]
    # a size other than one the model fixes is a re-declaration, not an error: exporters write placeholder
    # sizes into graphs that compute at any size; the import stage checks the graph at the spec's shape
    return []


def _preprocess_errors(spec: LoadedSpec, graph: ModelSummary) -> list[SpecError]:
    pre = spec.deployment.spec.preprocess
    if pre is None or not graph.inputs:
        return []
    names = [i.name for i in graph.inputs]
    name = pre.input if pre.input is not None else names[0]
    where = "preprocess.input" if pre.input is not None else "preprocess"
    info = graph.input(name)
    if info is None:
        message = f"the model has no input {name!r}{suggest(name, names, 'its inputs')}"
        return [spec.error(where, message, key=pre.input is None)]
    if len(info.dims) != 4:
        message = f"preprocessing takes an image input of rank 4; {name!r} has rank {len(info.dims)}"
        return [spec.error(where, message, key=pre.input is None)]
    return _resize_errors(spec)


def _mask_errors(spec: LoadedSpec, graph: ModelSummary) -> list[SpecError]:
    """A tokens task's padding mask is one of the model's inputs."""
    task = spec.field("evaluate.task")
    name = task.get("mask") if isinstance(task, dict) and task.get("type") == "tokens" else None
    if name is None or graph.input(name) is not None:
        return []
    names = [i.name for i in graph.inputs]
    return [
        spec.error(
            "evaluate.task.mask", f"the model has no input {name!r}{suggest(name, names, 'its inputs')}"
        )
    ]


def _resize_errors(spec: LoadedSpec) -> list[SpecError]:
    """ptq calibrates on fixed shapes: a resize whose source size is open leaves the raw input dynamic."""
    pre = spec.deployment.spec.preprocess
    resize = pre.resize if pre is not None else None
    if resize is None or spec.deployment.spec.quantization.mode != "ptq":
        return []
    missing = [f for f in ("source_height", "source_width") if getattr(resize, f) is None]
    if not missing:
        return []
    message = (
        f"{' and '.join(missing)} needed: quantization.mode ptq calibrates on fixed shapes, so the raw "
        "frame's size must be fixed"
    )
    return [spec.error("preprocess.resize", message)]


def _quantized_errors(spec: LoadedSpec, graph: ModelSummary) -> list[SpecError]:
    """quantization.mode against the model's own quantization (backends.passes.quantized): a model
    that carries Q/DQ nodes builds as `qat` (its own scales), never quantized or cast a second time;
    `qat` needs those nodes; a model of integer operators is built only as it is (`none`)."""
    mode = spec.deployment.spec.quantization.mode
    found = quantized(op for _, op in graph.nodes)
    if found is None:
        if mode != "qat":
            return []
        message = "qat builds a model that carries QuantizeLinear/DequantizeLinear nodes; this one has none"
        return [spec.error("quantization.mode", message)]
    if found.form == "integer" and mode != "none":
        message = (
            f"the model is already quantized with integer operators ({found.text()}), which NPU compilers "
            "do not take and no quantization mode rebuilds: set mode: none, or export the float model"
        )
        return [spec.error("quantization.mode", message)]
    if mode in ("ptq", "fp16"):
        again = "quantize it a second time" if mode == "ptq" else "cast its integer arithmetic to fp16"
        message = (
            f"the model is already quantized ({found.text()}): {mode} would {again}; "
            "mode: qat builds it with its own scales"
        )
        return [spec.error("quantization.mode", message)]
    return []


def _rule_errors(spec: LoadedSpec, graph: ModelSummary) -> list[SpecError]:
    errors: list[SpecError] = []
    names = [n for n, _ in graph.nodes]
    patterns: list[tuple[str, list[str]]] = [("rewrite.exclude", spec.deployment.spec.rewrite.exclude)]
    sensitive = spec.deployment.spec.quantization.sensitive_layers
    if sensitive is not None:
        patterns.append(("quantization.sensitive_layers.nodes", sensitive.nodes))
    for dotted, rules in patterns:
        for index, pattern in enumerate(rules):
            if not any(fnmatchcase(n, pattern) for n in names):
                hint = did_you_mean(pattern, names)
                errors.append(spec.error(f"{dotted}.{index}", f"{pattern!r} matches no node{hint}"))
    if sensitive is not None:
        op_types = sorted({op for _, op in graph.nodes})
        for index, op in enumerate(sensitive.op_types):
            if op not in op_types:
                hint = suggest(op, op_types, "its op types", limit=40)
                message = f"op type {op!r} is not in the model{hint}"
                errors.append(spec.error(f"quantization.sensitive_layers.op_types.{index}", message))
    return errors
