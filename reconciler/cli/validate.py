"""`npuctl validate [PATH...] [--json]`: schema and semantic checks, no build.

Prints every error as `file:line:col: field.path: message`, one per line on stdout (a summary goes to
stderr), and exits 0 when every spec is valid, 1 otherwise. A committed lock file whose verdicts,
measurement digests or stage keys do not follow from what it records is an error too (`FILE: field: why`). Imports nothing heavy: with the ONNX
summaries cached, it never imports onnx.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from reconciler.cli import _specargs
from reconciler.repo import find_root

if TYPE_CHECKING:
    from reconciler.spec import SpecReport
    from reconciler.spec._errors import SpecError


@click.command("validate")
@_specargs.argument
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (format_version 1).")
def command(paths: tuple[Path, ...], as_json: bool) -> int:
    """Check specs (schema and semantics against the real model) without building.

    SPEC is a spec file, a folder of specs or a spec's name (default: specs/ at the repository root).
    """
    from reconciler.spec import check
    from reconciler.spec._bases import check_base, discover_bases
    from reconciler.spec._errors import display_path

    root = find_root(Path.cwd())
    targets = list(paths) or [root / "specs"]
    reports = check(targets, root)
    bases = {base: check_base(base) for base in discover_bases(targets)}
    _annotate(reports, bases)
    lock_problems = _lock_problems(reports)
    if as_json:
        click.echo(json.dumps(_as_json(reports, bases, lock_problems), indent=2))
    else:
        _echo_errors(reports, bases, lock_problems)
    if not reports and not bases:
        shown = ", ".join(display_path(Path(t).absolute()) for t in targets)
        click.echo(f"no deployment specs found in {shown}", err=True)
        return 1
    if not as_json:
        click.echo(_summary(reports, bases, lock_problems), err=True)
    invalid = any(not r.valid for r in reports) or any(bases.values())
    return 1 if invalid or lock_problems else 0


def _annotate(reports: list[SpecReport], bases: dict[Path, list[SpecError]]) -> None:
    """Every error as a CI annotation (where the CI shows them)."""
    from reconciler.cli import _ci

    _ci.annotate(
        _ci.spec_error_annotations(
            [e for r in reports for e in r.errors] + [e for es in bases.values() for e in es]
        )
    )


def _as_json(
    reports: list[SpecReport], bases: dict[Path, list[SpecError]], lock_problems: list[str]
) -> dict[str, Any]:
    from reconciler.spec._errors import display_path

    return {
        "format_version": 1,
        "specs": [
            {
                "file": display_path(r.file),
                "name": r.name,
                "valid": r.valid,
                "errors": [e.to_json() for e in r.errors],
            }
            for r in reports
        ],
        "lock_problems": lock_problems,
        "bases": [
            {"file": display_path(b), "valid": not errors, "errors": [e.to_json() for e in errors]}
            for b, errors in bases.items()
        ],
    }


def _echo_errors(
    reports: list[SpecReport], bases: dict[Path, list[SpecError]], lock_problems: list[str]
) -> None:
    """Every error, one per line: the specs', then the base files', then the lock files'."""
    for report in reports:
        for error in report.errors:
            click.echo(str(error))
    for base_errors in bases.values():
        for error in base_errors:
            click.echo(str(error))
    for problem in lock_problems:
        click.echo(problem)


def _summary(reports: list[SpecReport], bases: dict[Path, list[SpecError]], lock_problems: list[str]) -> str:
    invalid = [r for r in reports if not r.valid]
    invalid_bases = [b for b, errors in bases.items() if errors]
    errors = sum(len(r.errors) for r in invalid)
    summary = f"{len(reports)} spec(s) checked: {len(reports) - len(invalid)} valid"
    summary += f", {len(invalid)} invalid ({errors} error(s))" if invalid else ""
    if bases:
        summary += f"; {len(bases)} base file(s): {len(bases) - len(invalid_bases)} valid"
        summary += f", {len(invalid_bases)} invalid" if invalid_bases else ""
    if lock_problems:
        summary += f"; {len(lock_problems)} lock file problem(s)"
    return summary


def _policy_problems(reports: list[Any]) -> list[str]:
    """The repository's trust policy (reconciler.trust.policy), when it has one: one located line."""
    from reconciler.repo import find_root
    from reconciler.trust import policy

    if not reports:
        return []
    try:
        policy.read(find_root(reports[0].file.parent)).names  # noqa: B018 - parsed to be checked
    except policy.PolicyError as exc:
        return [str(exc)]
    return []


def _lock_problems(reports: list[Any]) -> list[str]:
    """Each spec's committed lock re-derived (engine.integrity): a hand-edited verdict is an error.
    The engine is imported only when there is a lock file to check (validate stays light)."""
    from reconciler.repo import Layout
    from reconciler.spec._errors import display_path
    from reconciler.state import lockfile

    out: list[str] = _policy_problems(reports)
    for report in reports:
        path = Layout.lock_file(report.file)
        try:
            lock = lockfile.read(path)
        except lockfile.LockUnreadable as exc:
            out.append(str(exc).replace(str(path), display_path(path), 1))
            continue
        if lock is None:
            continue
        from reconciler.engine import integrity

        found = integrity.problems(lock, path)
        out += [line.replace(str(path), display_path(path), 1) for line in found]
    return out
