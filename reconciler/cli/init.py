"""`npuctl init MODEL.onnx --target T`: a commented starter spec from the model's real inputs.

npuctl cannot know a dynamic dimension or a latency budget, and a guess that validates (a 1x3x1x1
detector, `slo: {}`) would pass silently. So dynamic dimensions come from `--input name=1x3x640x640`, or
are asked for on a terminal, and otherwise get the placeholder 0 with a FIXME comment; the SLOs are FIXME
placeholders. Both fail `npuctl validate` at their line until the user fills them in. The spec carries a
`yaml-language-server` line pointing at the JSON Schema so editors complete it, and `.npuctl/` is added
to the repository's .gitignore. An existing file is never overwritten, and init only runs inside a
repository (it writes nothing outside the root it finds).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path, PurePath

import click
import yaml

import backends.catalog as catalog
from backends.passes.quantized import quantized
from backends.sdk.base import SpecNeed
from reconciler.repo import find_root
from reconciler.spec import ModelError, ModelSummary, SpecErrors, load, model_summary, semantic_errors
from reconciler.spec._errors import display_path
from reconciler.spec._options import refused
from reconciler.spec._paths import package_folder
from reconciler.spec._suggest import suggest
from reconciler.spec._summary import sha256_file
from reconciler.spec.models import is_valid_name

_PLAIN = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./-]*$")
_IGNORED = {".npuctl", ".npuctl/", "/.npuctl", "/.npuctl/"}


@click.command("init")
@click.argument("model", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--target", "-t", required=True, help="Catalog target id (see `npuctl targets`).")
@click.option("--name", "-n", default=None, help="metadata.name; default: <model>-<target>.")
@click.option(
    "--output", "-o", type=click.Path(path_type=Path, dir_okay=False), default=None,
    help="Spec file to write; default: specs/<name>.yaml at the repository root.",
)  # fmt: skip
@click.option(
    "--input", "-i", "given", multiple=True, metavar="NAME=SHAPE",
    help="Fix an input's shape, e.g. images=1x3x640x640 (repeatable); asked for on a terminal otherwise.",
)  # fmt: skip
def command(model: Path, target: str, name: str | None, output: Path | None, given: tuple[str, ...]) -> int:
    """Write a starter spec for MODEL.onnx, built from its real inputs."""
    root = find_root(Path.cwd())
    if not ((root / ".git").exists() or (root / ".npuctl").is_dir()):
        click.echo(
            f"error: {root} is not inside a git repository: run `git init` first (npuctl keeps its state "
            "and lock files in the repository, and writes nothing outside it)",
            err=True,
        )
        return 1
    try:
        shapes = _parse_inputs(given)
    except ValueError as exc:
        click.echo(f"error: --input: {exc}", err=True)
        return 1
    model = model.resolve()
    problem = _check_target(target) or (None if model.is_file() else f"model file not found: {model}")
    if problem:
        click.echo(f"error: {problem}", err=True)
        return 1
    name = name or _default_name(model, target)
    if not is_valid_name(name):
        click.echo(f"error: invalid name {name!r}: use lower-case letters, digits, '.', '_', '-'", err=True)
        return 1
    output = (output or root / "specs" / f"{name}.yaml").absolute()
    try:
        summary = model_summary(model, root)
        reference = _model_reference(model, output.parent, root)
    except (ModelError, ValueError) as exc:
        click.echo(f"error: {model}: {exc}", err=True)
        return 1
    try:
        fixed = _fixed_inputs(summary, shapes, ask=_interactive())
    except ValueError as exc:
        click.echo(f"error: --input: {exc}", err=True)
        return 1
    schema = _schema_ref(output.parent, root)
    digest = sha256_file(model.resolve())
    written = (summary, reference, name, target, schema, model.name, _task(model, fixed), fixed, digest)
    text = render(*written)
    needs = _needs(target, text)
    if needs:
        text = render(*written, needs)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        with output.open("x") as handle:
            handle.write(text)
    except FileExistsError:
        click.echo(
            f"error: {output} exists; not overwriting it (choose another --output or --name)", err=True
        )
        return 1
    _ignore_state(root)
    return _report(output, root, text, needs)


def _check_target(target: str) -> str | None:

    known = sorted(catalog.targets())
    if target in known:
        return None
    return f"unknown target {target!r}{suggest(target, known, 'known targets', limit=40)}"


def _needs(target: str, text: str) -> list[SpecNeed]:
    """What the target's backend needs (backends.sdk.base.SpecNeed) that the starter spec `text` leaves
    unset: each gets a FIXME placeholder."""
    from reconciler.spec._needs import target_needs

    section = (yaml.safe_load(text) or {}).get("spec") or {}
    return [n for n in target_needs(target) if n.unmet(section)]


def _need_lines(needs: list[SpecNeed]) -> dict[str, list[str]]:
    """Section -> the placeholder line of each need under it (a deeper field as a flow mapping)."""
    out: dict[str, list[str]] = {}
    for need in needs:
        section, *rest = need.field.split(".")
        value = scalar(need.placeholder)
        for key in reversed(rest[1:]):
            value = f"{{{key}: {value}}}"
        out.setdefault(section, []).append(f"    {rest[0]}: {value}  # FIXME: {need.message}")
    return out


def _default_name(model: Path, target: str) -> str:
    raw = f"{model.stem}-{target}".lower()
    cleaned = re.sub(r"[^a-z0-9._-]+", "-", raw).strip("._-")
    return cleaned[:63].rstrip("._-") or "model"


def _model_reference(model: Path, spec_dir: Path, root: Path) -> tuple[str | None, str]:
    """(package, path): spec-relative inside the repository, else relative to an installed package."""
    real_root = root.resolve()
    if model.is_relative_to(real_root):
        return None, PurePath(os.path.relpath(model, spec_dir.resolve())).as_posix()
    found = _package_of(model)
    if found is None:
        raise ValueError(
            "the model is outside the repository and not inside an installed package: copy it into the "
            "repository (specs may only reference files inside it)"
        )
    return found


def _package_of(model: Path) -> tuple[str, str] | None:

    search = {Path(p).resolve() for p in sys.path if p and Path(p).is_dir()}
    for parent in model.parents:
        if parent.parent in search and parent.name.isidentifier() and (parent / "__init__.py").is_file():
            try:
                if package_folder(parent.name) == parent:
                    return parent.name, model.relative_to(parent).as_posix()
            except LookupError:
                continue
    return None


def _schema_ref(spec_dir: Path, root: Path) -> str:
    schema = root.resolve() / "schemas" / "deployment.schema.json"
    return PurePath(os.path.relpath(schema, spec_dir.resolve())).as_posix()


def scalar(text: str) -> str:
    """`text` as a YAML scalar that reads back as this exact string."""

    resolved = yaml.resolver.Resolver().resolve(yaml.ScalarNode, text, (True, False))
    if _PLAIN.match(text) and resolved == "tag:yaml.org,2002:str":
        return text
    return json.dumps(text)


def _parse_inputs(given: tuple[str, ...]) -> dict[str, list[int]]:
    """`name=1x3x640x640` (or commas) -> {name: [1, 3, 640, 640]}."""
    out: dict[str, list[int]] = {}
    for item in given:
        name, sep, shape = item.rpartition("=")
        if not sep or not name:
            raise ValueError(f"{item!r}: write NAME=SHAPE, e.g. images=1x3x640x640")
        try:
            dims = [int(d) for d in re.split(r"[x,]", shape.strip()) if d.strip()]
        except ValueError:
            raise ValueError(f"{item!r}: the shape must be integers joined by 'x'") from None
        if not dims or any(d <= 0 for d in dims):
            raise ValueError(f"{item!r}: every dimension must be > 0")
        out[name] = dims
    return out


def _interactive() -> bool:
    return sys.stdin.isatty() and not os.environ.get("CI")


def _fixed_inputs(
    summary: ModelSummary, given: dict[str, list[int]], ask: bool
) -> dict[str, list[int | None]]:
    """Each input's dims: the model's static ones, then --input, then an answer on a terminal; None where
    nobody said (a FIXME placeholder)."""
    known = {i.name for i in summary.inputs}
    unknown = sorted(set(given) - known)
    if unknown:
        raise ValueError(
            f"the model has no input {unknown[0]!r}{suggest(unknown[0], sorted(known), 'inputs')}"
        )
    out: dict[str, list[int | None]] = {}
    for info in summary.inputs:
        dims = list(info.dims)
        if info.name in given:
            wanted = given[info.name]
            if len(wanted) != len(dims):
                raise ValueError(f"{info.name} has rank {len(dims)} in the model, got {len(wanted)} dims")
            out[info.name] = list(wanted)  # a size the model fixes otherwise re-declares it (docs/spec.md)
            continue
        fixed: list[int | None] = []
        for i, dim in enumerate(dims):
            if isinstance(dim, int):
                fixed.append(dim)
            elif ask:
                label = dim if dim is not None else "?"
                fixed.append(
                    click.prompt(f"{info.name}: size of dim {i} ('{label}')", type=click.IntRange(min=1))
                )
            else:
                fixed.append(None)
        out[info.name] = fixed
    return out


def _input_lines(name: str, dims: tuple[int | str | None, ...], fixed: list[int | None]) -> list[str]:
    if not dims:
        return [f"    {scalar(name)}: scalar  # rank 0"]
    if all(isinstance(d, int) for d in fixed):
        moved = any(isinstance(d, int) and d != f for d, f in zip(dims, fixed, strict=True))
        shown = "[" + ", ".join(str(d) if isinstance(d, int) else "?" for d in dims) + "]"
        note = (
            f"  # re-declares the model's {shown}: the import checks the graph at this shape" if moved else ""
        )
        return [f"    {scalar(name)}: [{', '.join(str(d) for d in fixed)}]{note}"]
    lines = [f"    {scalar(name)}:"]
    for dim, value in zip(dims, fixed, strict=True):
        if value is not None:
            lines.append(f"      - {value}")
        else:
            label = dim if dim is not None else "?"
            lines.append(
                f"      - 0  # FIXME: dynamic dim '{label}': its size (or rerun with --input {name}=...)"
            )
    return lines


def _task(model: Path, fixed: dict[str, list[int | None]]) -> list[str]:
    """The most likely `evaluate.task`, commented out: a guess from the output shapes at the spec's
    input shapes (`fixed`), to confirm."""
    from backends.tasks.guess import guess, yaml_line

    try:
        found = guess(model, fixed)
    except Exception as exc:  # onnx raises its own types; init still writes the spec
        return [f"    # task: ...  # could not read the outputs to guess the task ({type(exc).__name__})"]
    return [
        f"    # {yaml_line(found)}  # CONFIRM: guessed because {found.why}; uncomment it",
        "    #   (without a task, accuracy is the generic measure: cosine to the float model, or map IoU)",
    ]


def render(
    summary: ModelSummary,
    reference: tuple[str | None, str],
    name: str,
    target: str,
    schema: str,
    model: str,
    task: list[str] | None = None,
    fixed: dict[str, list[int | None]] | None = None,
    sha256: str = "",
    needs: list[SpecNeed] | None = None,
) -> str:
    """The starter spec text; `needs` get a FIXME placeholder each, first in their section."""
    fixed = fixed or {i.name: [d if isinstance(d, int) else None for d in i.dims] for i in summary.inputs}
    package, path = reference
    first = summary.inputs[0].name if summary.inputs else "input"
    relative_to = "the package folder" if package else "this file"
    model_lines = [f"    path: {scalar(path)}  # relative to {relative_to}"]
    if package:
        model_lines.append(f"    package: {package}  # installed package shipping the model (never imported)")
    model_lines.append(f"    # sha256: {sha256}  # uncomment to pin this exact file")
    inputs = [line for i in summary.inputs for line in _input_lines(i.name, i.dims, fixed[i.name])]
    lines = [
        f"# yaml-language-server: $schema={schema}",
        f"# Starter spec written by `npuctl init` for {model}. Check it with `npuctl validate`;",
        "# the schema above documents every field.",
        "apiVersion: npuctl/v1",
        "kind: Deployment",
        "metadata:",
        f"  name: {name}",
        "  labels: {}  # free-form; labels never trigger a rebuild",
        "spec:",
        "  model:",
        *model_lines,
        f"  target: {target}  # `npuctl targets` lists the catalog",
        "  inputs:  # every model input, every dimension fixed",
        *inputs,
        "  # shape_variants:  # more fixed shapes: one artifact each, picked at run time",
        f"  #   - {{{scalar(first)}: [...]}}",
        "  # preprocess:  # fold the camera-frame conversion into the model",
        f"  #   input: {scalar(first)}",
        "  #   layout: nhwc",
        "  #   dtype: uint8",
        "  #   color: {from: bgr, to: rgb}",
        "  #   mean: [127.5, 127.5, 127.5]",
        "  #   std: [127.5, 127.5, 127.5]",
        "  quantization:",
        *_quantization_lines(summary, target),
        "  compile:",
        "    batch: 1",
        "    optimization_level: 3",
        "  evaluate:",
        "    runner: local  # local | ssh://user@host | adb://serial",
        *(task or []),
        "    warmup: 10",
        "    runs: 100",
        "  slo:  # judged on the measurements; changing a threshold rebuilds nothing",
        "    latency_ms: {p90: FIXME}  # FIXME: your latency budget in ms, e.g. 20",
        "    accuracy: {max_drop: FIXME}  # FIXME: the accuracy you can lose to quantization, e.g. 0.01",
        "    # size_mb: 5",
        "    # npu_coverage: 1.0  # every compute op on the NPU",
    ]
    placeholders = _need_lines(needs or [])
    for section, extra in placeholders.items():
        header = f"  {section}:"
        if header in lines:
            at = lines.index(header) + 1
            lines[at:at] = extra
        else:
            at = lines.index(next(line for line in lines if line.startswith("  slo:")))
            lines[at:at] = [header, *extra]
    return "\n".join(lines) + "\n"


def _quantization_lines(summary: ModelSummary, target: str) -> list[str]:
    """The quantization section: float with the ptq fields commented out, or, for a model that
    arrives quantized, the one mode that builds it (reconciler.spec checks the same facts), a FIXME
    where the target's toolchain cannot build that mode."""
    found = quantized(op for _, op in summary.nodes)
    if found is not None and found.form == "qdq":
        why = [
            message
            for field, message in refused(target, {"quantization": {"mode": "qat"}})
            if "mode" in field
        ]
        if why:
            return [f"    mode: FIXME  # FIXME: the model arrives quantized ({found.text()}); {why[0]}"]
        return [f"    mode: qat  # the model arrives quantized ({found.text()}): built with its own scales"]
    if found is not None:
        return [
            f"    mode: none  # the model arrives quantized with integer operators ({found.text()}): built "
            "as it is; NPU compilers take a float or a Q/DQ model"
        ]
    return [
        "    mode: none  # none | fp16 | ptq | qat",
        "    # mode: ptq",
        "    # activations: uint8  # int8 | uint8 | int16 | uint16; default follows the target",
        "    # calibration: {data: ../data/calib, samples: 100, method: minmax}",
        "    # sensitive_layers:  # kept at higher precision: nodes (globs), op_types, first, last, or measured:",
        "    #   keep: fp16",
        "    #   auto: {max_accuracy_drop: 0.01, max_layers: 8}",
    ]


def _ignore_state(root: Path) -> None:
    """Add `.npuctl/` to the repository's .gitignore unless it is already there."""
    ignore = root / ".gitignore"
    text = ignore.read_text() if ignore.is_file() else ""
    if any(line.strip() in _IGNORED for line in text.splitlines()):
        return
    prefix = "" if not text or text.endswith("\n") else "\n"
    with ignore.open("a") as handle:
        handle.write(f"{prefix}.npuctl/\n")


def _report(output: Path, root: Path, text: str, needs: list[SpecNeed] | None = None) -> int:
    """Lists what the user must fill in (the FIXME placeholders, each at its line: those validate
    reports, and the backend's needs, whose placeholder may only fail once the rest validates) apart
    from real errors; exit 1 only for the latter."""
    try:
        errors = semantic_errors(load(output, root), root)
    except SpecErrors as exc:
        errors = exc.errors
    lines = text.splitlines()
    todo = [e for e in errors if 0 < e.line <= len(lines) and "FIXME" in lines[e.line - 1]]
    real = [e for e in errors if e not in todo]
    places = {(e.line, e.field) for e in todo}
    for need in needs or []:
        line = next(i for i, t in enumerate(lines, 1) if f"# FIXME: {need.message}" in t)
        places.add((line, f"spec.{need.field}"))
    for error in real:
        click.echo(str(error), err=True)
    click.echo(f"wrote {display_path(output)}")
    if places:
        click.echo(
            f"fill in {len(places)} FIXME placeholder(s) before `npuctl apply` (validate fails until then):"
        )
        for line, field in sorted(places):
            click.echo(f"  {display_path(output)}:{line}: {field}")
    return 1 if real else 0
