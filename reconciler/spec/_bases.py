"""`kind: DeploymentBase` files: found beside specs and checked on their own by `npuctl validate`.

A base is never built, but a typo in one breaks every spec that extends it, and an unused base is never
checked through `extends` at all. So validate checks each base it finds against the partial form of
the spec schema (every value present must be valid; nothing is required) and reports errors at the
base's own lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from reconciler.spec._discover import _HEAD, _KIND, _SUFFIXES
from reconciler.spec._errors import SpecError, SpecErrors
from reconciler.spec._extends import _check_base
from reconciler.spec._suggest import suggest
from reconciler.spec._yaml import dotted, flatten, read


def discover_bases(paths: Sequence[Path]) -> list[Path]:
    """Base files named directly or lying (non-recursively) in the given directories."""
    found: set[Path] = set()
    for given in paths:
        path = Path(given).absolute()
        candidates = sorted(path.iterdir()) if path.is_dir() else [path]
        for child in candidates:
            visible = child.suffix in _SUFFIXES and not child.name.startswith(".")
            if visible and child.is_file() and _declares_base(child):
                found.add(child.resolve())
    return sorted(found)


def _declares_base(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            head = handle.read(_HEAD).decode("utf-8", errors="replace")
    except OSError:
        return False
    match = _KIND.search(head)
    return match is not None and match.group(1) == "DeploymentBase"


def check_base(path: Path) -> list[SpecError]:
    """Every problem of one base file, located in it."""
    try:
        tree = read(path)
        _check_base(tree, path)
    except SpecErrors as exc:
        return exc.errors
    flat = flatten(tree)
    errors = []
    for error in sorted(_validator().iter_errors(flat.data), key=lambda e: [str(p) for p in e.absolute_path]):
        loc = tuple(error.absolute_path)
        prefer_key = error.validator == "additionalProperties"
        if prefer_key and isinstance(error.instance, dict):
            allowed = set((error.schema.get("properties") or {}).keys())
            for key in sorted(set(error.instance) - allowed):
                mark, _ = flat.nearest((*loc, key), prefer_key=True)
                message = f"unknown field{suggest(key, sorted(allowed), 'allowed')}"
                errors.append(SpecError(path, mark.line, mark.column, dotted((*loc, key)), message))
            continue
        mark, _ = flat.nearest(loc)
        errors.append(SpecError(path, mark.line, mark.column, dotted(loc), error.message))
    return errors


@cache
def _validator() -> Any:
    import jsonschema

    from reconciler.spec.schema import schema

    body = schema(plugins=True)  # a base may name a plug-in target installed here
    return jsonschema.validators.validator_for(body)(body)
