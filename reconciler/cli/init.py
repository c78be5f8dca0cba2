"""`npuctl init MODEL.onnx --target T`: a commented starter spec from the model's real inputs.

Dynamic dimensions get the placeholder 1 and a FIXME comment naming them; the spec carries a
`yaml-language-server` line pointing at the JSON Schema so editors complete it, and `.npuctl/` is
added to the repository's .gitignore. An existing file is never overwritten.
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
from reconciler.repo import find_root
from reconciler.spec import ModelError, ModelSummary, SpecErrors, load, model_summary, semantic_errors
from reconciler.spec._errors import display_path
from reconciler.spec._paths import package_folder
from reconciler.spec._suggest import suggest
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
def command(model: Path, target: str, name: str | None, output: Path | None) -> int:
    """Write a starter spec for MODEL.onnx, built from its real inputs."""
    root = find_root(Path.cwd())
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
    text = render(
        summary, reference, name, target, _schema_ref(output.parent, root), model.name, _task(model)
    )
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
    return _report(output, root, text.count("# FIXME"))


def _check_target(target: str) -> str | None:

    known = sorted(catalog.targets())
    if target in known:
        return None
    return f"unknown target {target!r}{suggest(target, known, 'known targets', limit=40)}"


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


def _input_lines(name: str, dims: tuple[int | str | None, ...]) -> list[str]:
    if not dims:
        return [f"    {scalar(name)}: scalar  # rank 0"]
    if all(isinstance(d, int) for d in dims):
        return [f"    {scalar(name)}: [{', '.join(str(d) for d in dims)}]"]
    lines = [f"    {scalar(name)}:"]
    for dim in dims:
        if isinstance(dim, int):
            lines.append(f"      - {dim}")
        else:
            label = dim if dim is not None else "?"
            lines.append(f"      - 1  # FIXME: dynamic dim '{label}', pick a value")
    return lines


def _task(model: Path) -> list[str]:
    """The most likely `evaluate.task`, commented out: a guess from the output shapes to confirm."""
    from backends.tasks.guess import guess, yaml_line

    try:
        found = guess(model)
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
) -> str:
    """The starter spec text."""
    package, path = reference
    first = summary.inputs[0].name if summary.inputs else "input"
    relative_to = "the package folder" if package else "this file"
    model_lines = [f"    path: {scalar(path)}  # relative to {relative_to}"]
    if package:
        model_lines.append(f"    package: {package}  # installed package shipping the model (never imported)")
    model_lines.append(f"    # sha256: {summary.sha256}  # uncomment to pin this exact file")
    inputs = [line for i in summary.inputs for line in _input_lines(i.name, i.dims)]
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
        "    mode: none  # none | fp16 | ptq | qat",
        "    # mode: ptq",
        "    # activations: uint8  # int8 | uint8 | int16 | uint16; default follows the target",
        "    # calibration: {data: ../data/calib, samples: 100, method: minmax}",
        "    # sensitive_layers:  # kept at higher precision: nodes (globs), op_types, first, last, or measured:",
        "    #   keep: fp16",
        "    #   auto: {max_accuracy_drop: 0.01, max_layers: 8}",
        "  compile:",
        "    batch: 1",
        "    optimization_level: 3",
        "  evaluate:",
        "    runner: local  # local | ssh://user@host | adb://serial",
        *(task or []),
        "    warmup: 10",
        "    runs: 100",
        "  slo: {}  # judged on the measurements; changing a threshold rebuilds nothing",
        "  # slo:",
        "  #   latency_ms: {p90: 20}",
        "  #   accuracy: {max_drop: 0.005}",
        "  #   size_mb: 5",
    ]
    return "\n".join(lines) + "\n"


def _ignore_state(root: Path) -> None:
    """Add `.npuctl/` to the repository's .gitignore unless it is already there."""
    ignore = root / ".gitignore"
    text = ignore.read_text() if ignore.is_file() else ""
    if any(line.strip() in _IGNORED for line in text.splitlines()):
        return
    prefix = "" if not text or text.endswith("\n") else "\n"
    with ignore.open("a") as handle:
        handle.write(f"{prefix}.npuctl/\n")


def _report(output: Path, root: Path, fixmes: int) -> int:

    try:
        errors = semantic_errors(load(output, root), root)
    except SpecErrors as exc:
        errors = exc.errors
    for error in errors:
        click.echo(str(error), err=True)
    click.echo(f"wrote {display_path(output)}")
    if fixmes:
        click.echo(f"{fixmes} dynamic dimension(s) set to 1: search for FIXME and pick real sizes")
    return 1 if errors else 0
