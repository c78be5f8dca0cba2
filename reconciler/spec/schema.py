"""Generate `schemas/deployment.schema.json` from the spec models (the single source of truth).

    python -m reconciler.spec.schema           # rewrite the checked-in file
    python -m reconciler.spec.schema --check   # exit 1 when it is stale
    python -m reconciler.spec.schema --plugins -o my-schema.json   # with installed plug-ins' targets

The output is deterministic (sorted keys, fixed indentation), so a stale file shows up as a diff.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from reconciler.spec._schema_shape import language_schema
from reconciler.spec.models import API_VERSION, Deployment

SCHEMA_BASE = "urn:npuctl:schemas:"
"""The $id prefix of every npuctl schema (the spec and every --json output): an identifier, not a URL
anyone must serve; each schema's $id is this plus its file name in schemas/."""
SCHEMA_ID = f"{SCHEMA_BASE}deployment.schema.json"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_FILE = Path(__file__).resolve().parents[2] / "schemas" / "deployment.schema.json"


def schema(plugins: bool = False) -> dict[str, Any]:
    """The JSON Schema of a deployment spec file (the YAML, read as JSON): complete specs, specs with
    `extends` and `kind: DeploymentBase` files (see _schema_shape)."""
    body = language_schema(
        Deployment.model_json_schema(by_alias=True, mode="validation"),
        _targets(plugins),
        _backend_options(plugins),
    )
    body["$schema"] = DRAFT
    body["$id"] = SCHEMA_ID
    body["title"] = f"npuctl Deployment ({API_VERSION})"
    body["description"] = (
        "A deployment spec: which model goes to which NPU target, how it is prepared, quantized, compiled "
        "and measured, and the SLOs it must meet. Generated from reconciler/spec/models.py; do not edit."
    )
    return body


def _targets(plugins: bool) -> dict[str, str]:
    import backends.catalog as catalog

    out = {}
    for tid, t in catalog.targets(plugins=plugins).items():
        what = t.description or f"{t.vendor} {t.chip} {t.npu}".strip()
        out[tid] = f"{what} (backend {t.backend})"
    return out


def _backend_options(plugins: bool) -> dict[str, tuple[dict[str, Any], list[str]]]:
    """Backends' compile.options schemas, with the catalog targets each builds by default. Plug-ins only
    on request: this repository's checked-in schema must not depend on what happens to be installed."""
    import backends.catalog as catalog
    from backends import registry

    out = {}
    for name in sorted(registry.known() if plugins else registry.BUILTIN):
        ids = sorted(tid for tid, t in catalog.targets(plugins=plugins).items() if t.backend == name)
        out[name] = (registry.backend(name).options_schema(), ids)
    return out


def render(plugins: bool = False) -> str:
    return json.dumps(schema(plugins), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reconciler.spec.schema", description="Generate the deployment JSON Schema."
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when the checked-in schema is stale")
    parser.add_argument("--output", type=Path, default=SCHEMA_FILE, help="schema file (default: %(default)s)")
    parser.add_argument(
        "--plugins",
        action="store_true",
        help="include the targets and backends of installed plug-ins (for a team's own schema file)",
    )
    args = parser.parse_args(argv)
    text = render(args.plugins)
    current = args.output.read_text() if args.output.is_file() else None
    if args.check:
        if current != text:
            print(f"{args.output} is stale: run `python -m reconciler.spec.schema`", file=sys.stderr)
            return 1
        return 0
    if current != text:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
