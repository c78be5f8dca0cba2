"""`npuctl targets [NAME] [--json]`: the target catalog, or one target with its op-support summary.

The catalog is plain data (backends/catalog); this command only reads it, so it is as fast as validate.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from typing import Any

import click

from backends.catalog import SUPPORT_LEVELS, Target, did_you_mean, op_table, target, targets

FORMAT_VERSION = 1
_PIPE_WIDTH = 200
"""Rich wraps at 80 columns when stdout is not a terminal; a wide table is more useful in a pipe
(COLUMNS, when set, still wins)."""
_NO_WRAP = {"id", "backend"}


def target_record(t: Target) -> dict[str, Any]:
    """A target as JSON: every field, extras flattened under `extra`, and op-support counts."""
    record = asdict(t)
    record["precisions"] = list(t.precisions)
    record["op_support"] = op_support(t)
    record["built_by"] = built_by(t)
    return record


def built_by(t: Target) -> dict[str, str]:
    """Which backend builds the target here, whether its toolchain is ready, and what evidence it gives."""
    from backends.registry import describe

    return describe(t)


def op_support(t: Target) -> dict[str, int]:
    """Counts per support level of the target's op table (default-domain ONNX ops only)."""
    try:
        return op_table(t.op_table).counts()
    except KeyError:
        return dict.fromkeys(SUPPORT_LEVELS, 0)


def _tops(value: float) -> str:
    return "-" if value == 0 else f"{value:g}"


def short_version(version: str) -> str:
    """`release (date) sha256:abcdef...` -> `release abcdef12`: the list view's compact form."""
    parts = version.split()
    digest = parts[-1].removeprefix("sha256:")[:8] if len(parts) > 1 else ""
    return f"{parts[0]} {digest}".strip() if parts else ""


def _console() -> Any:
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal:
        width = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else _PIPE_WIDTH
        console = Console(highlight=False, width=width, no_color=True)
    return console


def print_catalog(all_targets: list[Target]) -> None:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for header, justify in [
        ("id", "left"),
        ("vendor", "left"),
        ("chip", "left"),
        ("NPU", "left"),
        ("backend", "left"),
        ("INT8 TOPS", "right"),
        ("FP16 TOPS", "right"),
        ("GB/s", "right"),
        ("cores", "right"),
        ("precisions", "left"),
        ("op-table version", "left"),
    ]:
        table.add_column(
            header,
            justify=justify,  # type: ignore[arg-type]
            no_wrap=header in _NO_WRAP,
            overflow="fold",
        )
    for t in all_targets:
        table.add_row(
            t.id,
            t.vendor,
            t.chip,
            t.npu,
            t.backend,
            _tops(t.peak_tops_int8),
            _tops(t.peak_tops_fp16),
            f"{t.bandwidth_gbps:g}",
            str(t.npu_cores),
            " ".join(t.precisions),
            short_version(t.op_table_version),
        )
    console = _console()
    console.print(table)
    console.print(builders_table(all_targets))


def builders_table(all_targets: list[Target]) -> Any:
    """Per target: the backend that builds it here, its toolchain's state, the evidence it can give."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, title="built here by")
    table.add_column("id", no_wrap=True)
    table.add_column("backend", no_wrap=True)
    table.add_column("toolchain here", overflow="fold")
    table.add_column("evidence here", overflow="fold")
    for t in all_targets:
        here = built_by(t)
        table.add_row(t.id, here["backend"], here["toolchain"], here["evidence"])
    return table


def print_target(t: Target) -> None:
    from rich.table import Table

    fields = Table(show_header=False, box=None, title=f"target {t.id}", title_justify="left")
    fields.add_column("field", style="bold")
    fields.add_column("value", overflow="fold")
    rows: list[tuple[str, str]] = [
        ("vendor", t.vendor),
        ("chip", t.chip),
        ("npu", t.npu),
        ("backend", t.backend),
        ("peak INT8 TOPS", _tops(t.peak_tops_int8)),
        ("peak FP16 TOPS", _tops(t.peak_tops_fp16)),
        ("bandwidth GB/s", f"{t.bandwidth_gbps:g}"),
        ("NPU cores", str(t.npu_cores)),
        ("precisions", ", ".join(t.precisions)),
        ("default activation", t.default_activation),
        ("CPU GFLOPS", f"{t.cpu_gflops:g}"),
        ("op table", t.op_table),
        ("op table version", t.op_table_version),
        ("description", t.description),
    ]
    here = built_by(t)
    rows += [("toolchain here", here["toolchain"]), ("evidence here", here["evidence"])]
    for key, value in sorted(t.extra.items()):
        rows.extend(_extra_rows(key, value))
    for key, value in rows:
        fields.add_row(key, value)
    counts = op_support(t)
    support = Table(title=f"op support ({t.op_table}, ONNX default domain)", title_justify="left")
    for level in SUPPORT_LEVELS:
        support.add_column(level, justify="right")
    support.add_row(*(str(counts.get(level, 0)) for level in SUPPORT_LEVELS))
    console = _console()
    console.print(fields)
    console.print(support)


def markdown_catalog(all_targets: list[Target]) -> str:
    """The catalog as Markdown: docs/targets.md is exactly this text (a test keeps it in sync)."""
    lines = [
        "# Target catalog",
        "",
        "Generated by `npuctl targets --format markdown` from `backends/catalog/` (do not edit by hand).",
        "`npuctl targets NAME` shows one target in full; every figure there names its source and whether",
        "it is published, derived or assumed (`basis`).",
        "",
        "| id | vendor | chip | NPU | backend | INT8 TOPS | FP16 TOPS | GB/s | cores | precisions "
        "| default activation | op table |",
        "|---|---|---|---|---|---:|---:|---:|---:|---|---|---|",
    ]
    for t in all_targets:
        cells = [
            f"`{t.id}`",
            t.vendor,
            t.chip,
            t.npu,
            t.backend,
            _tops(t.peak_tops_int8),
            _tops(t.peak_tops_fp16),
            f"{t.bandwidth_gbps:g}",
            str(t.npu_cores),
            " ".join(t.precisions),
            t.default_activation,
            f"`{t.op_table}`",
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines += ["", "## Op-support tables", ""]
    lines.append("| table | version | yes | partial | no | unknown | source |")
    lines.append("|---|---|---:|---:|---:|---:|---|")
    for table_id in sorted({t.op_table for t in all_targets}):
        table = op_table(table_id)
        counts = table.counts()
        numbers = " | ".join(str(counts[level]) for level in SUPPORT_LEVELS)
        lines.append(f"| `{table_id}` | {table.version} | {numbers} | {table.source} |")
    lines += [
        "",
        "Counts are ONNX default-domain ops. Tables are generated from published vendor lists by",
        "`python tools/gen_optables.py` (sources in tools/opsupport); a table's version (source release,",
        "date, content hash) enters the build keys of the stages that read it. A list is an upper bound:",
        "where a toolchain can report its own placement, that report wins.",
        "",
        "## Targets",
    ]
    for t in all_targets:
        lines += ["", f"### `{t.id}`", "", t.description, ""]
        fallback = t.extra.get("fallback")
        if fallback:
            lines.append(f"- unsupported ops: {fallback}")
        for source in t.extra.get("source", []):
            lines.append(f"- source: {source}")
    return "\n".join(lines) + "\n"


def _extra_rows(key: str, value: Any) -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [(f"{key}.{k}", str(v)) for k, v in sorted(value.items())]
    if isinstance(value, list):
        return [(key if i == 0 else "", str(v)) for i, v in enumerate(value)]
    return [(key, str(value))]


@click.command("targets", help="List the target catalog, or show one target (NAME) in full.")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (format_version 1).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "markdown"]),
    default="text",
    help="markdown: the whole catalog as docs/targets.md has it.",
)
def command(name: str | None, as_json: bool, fmt: str) -> int:
    if name is None:
        all_targets = list(targets().values())
        if fmt == "markdown":
            click.echo(markdown_catalog(all_targets), nl=False)
        elif as_json:
            doc = {"format_version": FORMAT_VERSION, "targets": [target_record(t) for t in all_targets]}
            click.echo(json.dumps(doc, indent=2, sort_keys=True))
        else:
            print_catalog(all_targets)
        return 0
    try:
        chosen = target(name)
    except KeyError:
        hint = did_you_mean(name)
        suggestion = f" (did you mean {hint!r}?)" if hint else ""
        print(f"error: unknown target {name!r}{suggestion}; `npuctl targets` lists them", file=sys.stderr)
        return 1
    if as_json:
        click.echo(
            json.dumps(
                {"format_version": FORMAT_VERSION, "target": target_record(chosen)}, indent=2, sort_keys=True
            )
        )
    else:
        print_target(chosen)
    return 0
