"""Generate the JSON Schemas of lock files and every command's `--json` output from the records.

    python -m reconciler.records.schemas           # rewrite the checked-in files in schemas/
    python -m reconciler.records.schemas --check   # exit 1 when one is stale (a test runs it)

The output is deterministic (sorted keys, fixed indentation), so a stale file shows up as a diff, and
the contract a script reads cannot drift from the code that writes it. The spec's own schema
(deployment.schema.json) comes from the spec models (reconciler.spec.schema).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from reconciler.records import commands, lock, profile, results
from reconciler.spec.schema import DRAFT, SCHEMA_BASE

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"

OUTPUTS: dict[str, tuple[type[BaseModel], str, str]] = {
    "lock": (
        lock.LockFile,
        "npuctl lock file (specs/NAME.lock.json)",
        "Written by apply, committed beside the spec. Deterministic: sorted keys, no timestamps.",
    ),
    "apply": (
        results.ApplyOutput,
        "npuctl apply --json",
        "`npuctl apply --json`. Exit codes: 0 built and no SLO failed (SLOs met, met on an estimate or "
        "carried over), 3 an SLO failed or has no evidence (with --strict: any SLO not passed on a "
        "measurement), 1 error.",
    ),
    "plan": (
        results.PlanOutput,
        "npuctl plan --json",
        "`npuctl plan --json`. Exit codes: 0 nothing to do, 2 changes pending, 3 with "
        "--fail-on-regression an SLO would regress, 1 error (incl. a lock failing its integrity checks).",
    ),
    "status": (results.StatusOutput, "npuctl status --json", "`npuctl status --json`. Always exit 0."),
    "validate": (commands.ValidateOutput, "npuctl validate --json", "`npuctl validate --json`."),
    "artifacts": (
        commands.ArtifactsOutput,
        "npuctl artifacts SPEC --json",
        "`npuctl artifacts SPEC --json`.",
    ),
    "backends": (commands.BackendsOutput, "npuctl backends --json", "`npuctl backends --json`."),
    "explain": (commands.ExplainOutput, "npuctl explain SPEC [STAGE] --json", "`npuctl explain --json`."),
    "explain-profile": (
        profile.ProfileOutput,
        "npuctl explain SPEC --profile --json",
        "Per variant: evaluate's per-layer profile (profile.json, backends.profiles) or why there is none.",
    ),
    "targets": (commands.TargetsOutput, "npuctl targets --json", "`npuctl targets --json`."),
    "toolchains": (
        commands.ToolchainsOutput,
        "npuctl toolchain list --json",
        "`npuctl toolchain list --json`.",
    ),
    "remote-sync": (
        commands.RemoteSyncOutput,
        "npuctl push / pull --json",
        "`npuctl push --json`, `pull --json`.",
    ),
    "gc": (commands.GcOutput, "npuctl gc --json", "`npuctl gc --json`."),
    "audit": (commands.AuditOutput, "npuctl audit --json", "`npuctl audit --json`."),
}
"""File stem in schemas/ -> (the record, the schema's title, its description)."""


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema of one output, by its file stem."""
    model, title, description = OUTPUTS[name]
    body = model.model_json_schema(mode="serialization")
    body["$schema"] = DRAFT
    body["$id"] = f"{SCHEMA_BASE}{name}.schema.json"
    body["title"] = title
    body["description"] = f"{description} Generated from reconciler/records; do not edit."
    return body


def schemas() -> dict[str, dict[str, Any]]:
    return {name: schema(name) for name in OUTPUTS}


def render(body: dict[str, Any]) -> str:
    return json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reconciler.records.schemas",
        description="Generate the JSON Schemas of lock files and --json outputs.",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a checked-in schema is stale")
    parser.add_argument("--dir", type=Path, default=SCHEMA_DIR, help="schema folder (default: %(default)s)")
    args = parser.parse_args(argv)
    stale = []
    for name, body in schemas().items():
        path = args.dir / f"{name}.schema.json"
        text = render(body)
        current = path.read_text() if path.is_file() else None
        if current == text:
            continue
        if args.check:
            stale.append(path)
        else:
            args.dir.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    for path in stale:
        print(f"{path} is stale: run `python -m reconciler.records.schemas`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
