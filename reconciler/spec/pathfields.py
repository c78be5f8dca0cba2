"""Spec fields that name a file or folder: declared once, on the spec models, with `SpecPath`.

A field is a path when its annotation carries a `SpecPath` marker (reconciler.spec.models). Everything
that treats paths specially is derived from those markers: `extends` rebases them to the child's folder,
validation confines them to the repository, watch mode watches what they name, and a stage's build key
holds the digest of every file or folder named by a path field the stage reads (reconciler.engine.stages).

`declared(model)` walks a model class and finds the markers. Its result for the deployment spec is
generated into reconciler.spec._path_table (`python -m reconciler.spec.pathfields`; a test fails when it
is stale), because a spec loaded from its cache is checked and planned without importing pydantic.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from reconciler.spec._path_table import DECLARED

PathKind = Literal["file", "folder"]


@dataclass(frozen=True)
class SpecPath:
    """The marker on a model field: the field names a file or folder, relative to the file that wrote it."""

    kind: PathKind
    input: str
    """The name the stage key and the stage's request give the file (model, eval_data, ...)."""
    package: str | None = None
    """A sibling field naming an installed package; when set, the path is relative to the package's
    folder instead (not rebased, confined to the package)."""


@dataclass(frozen=True)
class PathField:
    """A declared path field of the deployment spec."""

    dotted: str
    """The field's path under `spec.` (e.g. quantization.calibration.data)."""
    kind: PathKind
    input: str
    package: str | None = None
    """The dotted path of the package field (model.package), if the path may be package-relative."""

    @property
    def loc(self) -> tuple[str, ...]:
        return tuple(self.dotted.split("."))


PATH_FIELDS: tuple[PathField, ...] = tuple(PathField(*row) for row in DECLARED)
"""Every path field of the deployment spec, in model order."""


def value(spec: Mapping[str, Any] | None, field: PathField) -> Any:
    """The field's value in a spec's JSON (`spec:` section, raw or validated); None where it is absent
    (an unset parent, or another variant of a union: evaluate.task.charset of a detection task)."""
    node: Any = spec
    for key in field.loc:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def named(spec: Mapping[str, Any] | None) -> Iterator[tuple[PathField, str]]:
    """Each declared path field the spec sets, with the path it names (as written, not resolved)."""
    for field in PATH_FIELDS:
        found = value(spec, field)
        if isinstance(found, str):
            yield field, found


def declared(model: type, prefix: tuple[str, ...] = ()) -> tuple[PathField, ...]:
    """The path fields of a pydantic model class, found by walking its fields (by alias), optionals and
    unions included. A marker inside a list or a mapping is refused: a dotted path cannot name it."""
    out: dict[str, PathField] = {}
    for name, info in model.model_fields.items():  # type: ignore[attr-defined]
        loc = (*prefix, info.alias or name)
        markers = [m for m in info.metadata if isinstance(m, SpecPath)]
        for found in [*_marked(markers, loc), *_walk(info.annotation, loc, contained=False)]:
            if out.setdefault(found.dotted, found) != found:
                raise TypeError(f"{found.dotted} is declared twice, differently")
    return tuple(out.values())


def _marked(markers: list[SpecPath], loc: tuple[str, ...]) -> list[PathField]:
    """The fields the markers at `loc` declare; a package sibling becomes its dotted path."""
    return [
        PathField(
            ".".join(loc), m.kind, m.input, None if m.package is None else ".".join((*loc[:-1], m.package))
        )
        for m in markers
    ]


def _walk(annotation: Any, loc: tuple[str, ...], contained: bool) -> list[PathField]:
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *metadata = get_args(annotation)
        markers = [m for m in metadata if isinstance(m, SpecPath)]
        if markers and contained:
            raise TypeError(f"{'.'.join(loc)}: a path inside a list or mapping cannot be declared")
        return [*_marked(markers, loc), *_walk(inner, loc, contained)]
    if origin in (Union, types.UnionType):
        return [f for arm in get_args(annotation) for f in _walk(arm, loc, contained)]
    if origin is not None:  # list[...], dict[...], Literal[...]
        return [f for arg in get_args(annotation) for f in _walk(arg, loc, True)]
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        found = declared(annotation, loc)
        if found and contained:
            raise TypeError(f"{'.'.join(loc)}: a path inside a list or mapping cannot be declared")
        return list(found)
    return []


TABLE_FILE = Path(__file__).with_name("_path_table.py")


def table_source() -> str:
    """The generated reconciler.spec._path_table module, from the markers on the spec models."""
    from reconciler.spec.models import DeploymentSpec

    def text(item: str | None) -> str:
        return "None" if item is None else json.dumps(item)  # the quotes ruff format writes

    rows = "".join(
        f"    ({', '.join(text(i) for i in (f.dotted, f.kind, f.input, f.package))}),\n"
        for f in declared(DeploymentSpec)
    )
    return (
        '"""The spec\'s path fields as (dotted, kind, input, package) rows: generated by\n'
        "`python -m reconciler.spec.pathfields` from the SpecPath markers on reconciler/spec/models.py;\n"
        'do not edit (reconciler.spec.pathfields says why it is generated)."""\n\n'
        "from typing import Literal\n\n"
        'DECLARED: tuple[tuple[str, Literal["file", "folder"], str, str | None], ...] = (\n'
        f"{rows})\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate reconciler/spec/_path_table.py.")
    parser.add_argument("--check", action="store_true", help="exit 1 when the checked-in table is stale")
    args = parser.parse_args(argv)
    text = table_source()
    if args.check:
        stale = TABLE_FILE.read_text() != text
        if stale:
            print(f"{TABLE_FILE} is stale: run python -m reconciler.spec.pathfields", file=sys.stderr)
        return 1 if stale else 0
    TABLE_FILE.write_text(text)
    return 0


if __name__ == "__main__":  # run through the imported module, whose SpecPath the models use
    from reconciler.spec import pathfields

    sys.exit(pathfields.main())
