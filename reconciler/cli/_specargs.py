"""What a command's spec argument names: a spec file or a folder of specs (a path), or a spec by its
name (metadata.name, or its file's stem) among the specs under the repository's specs/ folder.

Every command reads its arguments through `resolve`, so `npuctl plan det-cpu`, `npuctl report det-cpu`
and `npuctl report specs/det-cpu.yaml` mean the same spec. An argument that is neither a path nor a
known name is an error naming it (exit 1, with a did-you-mean from the known names): a typo must never
read as a spec that exists but is broken.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from reconciler.repo import Layout, find_root

F = TypeVar("F", bound=Callable[..., Any])


class UnknownSpec(click.ClickException):
    """An argument that names no file, folder or spec: one line on stderr, exit 1."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        ctx = click.get_current_context(silent=True)
        self.command = f"npuctl {ctx.info_name}" if ctx is not None and ctx.info_name else "npuctl"

    def show(self, file: object = None) -> None:
        click.echo(f"{self.command}: {self.message}", err=True)


@dataclass(frozen=True)
class Known:
    """A spec under specs/: its file and the names it answers to."""

    file: Path
    name: str | None

    @property
    def stem(self) -> str:
        return self.file.name.split(".")[0]


def known_specs(root: Path) -> list[Known]:
    """The spec files under the repository's specs/ folder, with their metadata.name when readable."""
    folder = Layout(root).default_specs()
    if not folder.is_dir():
        return []
    from reconciler.spec import check

    return [Known(r.file, r.name) for r in check([folder], root, semantic=False)]


def resolve(args: tuple[str | Path, ...], root: Path | None = None) -> tuple[Path, ...]:
    """Each argument as a path: itself when it exists, else the file of the spec it names.

    Raises UnknownSpec for the first argument that is neither."""
    if all(Path(a).exists() or Path(a).is_symlink() for a in args):
        return tuple(Path(a) for a in args)
    root = root or find_root(Path.cwd())
    specs = known_specs(root)
    out = []
    for arg in args:
        path = Path(arg)
        if path.exists() or path.is_symlink():
            out.append(path)
            continue
        matches = [k.file for k in specs if str(arg) in (k.name, k.stem)]
        if not matches:
            raise UnknownSpec(_unknown(str(arg), specs, root))
        out.extend(dict.fromkeys(matches))
    return tuple(out)


def one(arg: str, root: Path | None = None) -> Path:
    """The one spec file an argument names (a file, a folder holding exactly one spec, or a name)."""
    root = root or find_root(Path.cwd())
    [path] = resolve((arg,), root)
    if not path.is_dir():
        return path.absolute()
    from reconciler.spec._discover import discover_with_errors

    files, _ = discover_with_errors([path], root)
    if len(files) != 1:
        raise UnknownSpec(f"{arg}: a folder holding {len(files)} specs: name one of them")
    return files[0]


def _unknown(arg: str, specs: list[Known], root: Path) -> str:
    from reconciler.spec._suggest import did_you_mean

    names = sorted({n for k in specs for n in (k.name, k.stem) if n})
    where = Layout(root).default_specs()
    shown = where.relative_to(root) if where.is_relative_to(root) else where
    hint = did_you_mean(arg, names) or (f"; specs there: {', '.join(names[:12])}" if names else "")
    return f"{arg}: no such file or folder, and no spec under {shown}/ has that name{hint}"


def _callback(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[Path, ...]:
    return resolve(value)


def argument(func: F) -> F:
    """The `[SPEC]...` argument of the commands that take many specs: files, folders or names, resolved
    before the command runs (none: the command's default, specs/)."""
    return click.argument("paths", nargs=-1, metavar="[SPEC]...", callback=_callback)(func)
