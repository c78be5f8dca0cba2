"""JSON Schemas of the other commands' `--json` output (validate, audit, explain, gc, targets, toolchain
list, artifacts, backends, push and pull), beside those of plan, apply, status and lock files (output_schemas).

Each pins the top-level shape and the fields scripts read; fields may be added (the contract: add
freely, never rename), so only the top level forbids unknown keys where a typo would hide a field.
"""

from __future__ import annotations

from typing import Any

_DIGEST = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_ERROR = {
    "type": "object",
    "required": ["file", "line", "column", "field", "message"],
    "properties": {
        "file": {"type": "string"},
        "line": {"type": "integer", "minimum": 0},
        "column": {"type": "integer", "minimum": 0},
        "field": {"type": "string"},
        "message": {"type": "string"},
    },
}


def _obj(required: list[str], properties: dict[str, Any], closed: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "required": required, "properties": properties}
    if closed:
        out["additionalProperties"] = False
    return out


def _list(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


def _top(
    base: str, name: str, command: str, required: list[str], properties: dict[str, Any]
) -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"{base}{name}.schema.json",
        "title": f"npuctl {command} --json",
        **_obj(["format_version", *required], {"format_version": {"const": 1}, **properties}, closed=True),
    }


def schemas(base: str) -> dict[str, dict[str, Any]]:
    """File stem -> schema; `base` is the $id prefix every npuctl schema shares."""
    spec_row = _obj(
        ["file", "name", "valid", "errors"],
        {
            "file": {"type": "string"},
            "name": {"type": ["string", "null"]},
            "valid": {"type": "boolean"},
            "errors": _list(_ERROR),
        },
    )
    base_row = _obj(
        ["file", "valid", "errors"],
        {"file": {"type": "string"}, "valid": {"type": "boolean"}, "errors": _list(_ERROR)},
    )
    artifact = _obj(
        ["variant", "inputs", "file", "name", "size", "sha256", "entry", "path"],
        {
            "variant": {"type": "string"},
            "inputs": {"type": "object", "additionalProperties": _list({"type": "integer"})},
            "file": {"type": "string"},
            "name": {"type": "string"},
            "size": {"type": "integer", "minimum": 0},
            "sha256": _DIGEST,
            "entry": {"type": "boolean", "description": "the file an app opens first"},
            "path": {
                "type": ["string", "null"],
                "description": "in the local store; null: only the lock records it",
            },
        },
    )
    backend = _obj(
        ["name", "origin", "module", "targets", "toolchain", "stages", "evidence"],
        {
            "name": {"type": "string"},
            "origin": {"type": "string", "description": "built-in, or `plug-in DIST VERSION`"},
            "module": {"type": "string"},
            "targets": _list({"type": "string"}),
            "toolchain": {"type": "string", "description": "ready, or what to install"},
            "stages": _list({"type": "string"}),
            "evidence": {"type": "string"},
        },
    )
    stage = _obj(
        ["stage", "variant", "key", "up_to_date", "inputs"],
        {
            "stage": {"type": "string"},
            "variant": {"type": "string"},
            "key": {"type": ["string", "null"]},
            "last_key": {"type": ["string", "null"]},
            "up_to_date": {"type": "boolean"},
            "identity": {"type": "boolean"},
            "inputs": _list({"type": "object"}),
        },
    )
    target = _obj(
        ["id", "vendor", "chip", "npu", "backend", "op_table", "built_by", "op_support"],
        {
            "id": {"type": "string"},
            "backend": {"type": "string"},
            "op_table": {"type": "string"},
            "built_by": _obj(["backend", "toolchain", "evidence"], {}),
            "op_support": {"type": "object", "additionalProperties": {"type": "integer"}},
        },
    )
    toolchain = _obj(
        ["name", "version", "installed", "path"],
        {
            "name": {"type": "string"},
            "version": {"type": "string"},
            "installed": {"type": "boolean"},
            "path": {"type": "string"},
        },
    )
    return {
        "validate": _top(
            base,
            "validate",
            "validate",
            ["specs"],
            {
                "specs": _list(spec_row),
                "bases": _list(base_row),
                "lock_problems": _list({"type": "string", "description": "file: field: what does not match"}),
            },
        ),
        "artifacts": _top(
            base,
            "artifacts",
            "artifacts SPEC",
            ["spec", "artifacts"],
            {"spec": {"type": ["string", "null"]}, "artifacts": _list(artifact)},
        ),
        "backends": _top(
            base,
            "backends",
            "backends",
            ["backends", "catalog_plugins"],
            {"backends": _list(backend), "catalog_plugins": _list({"type": "string"})},
        ),
        "explain": _top(
            base,
            "explain",
            "explain SPEC [STAGE]",
            ["spec", "stages"],
            {"spec": {"type": "string"}, "stages": _list(stage)},
        ),
        "targets": _top(base, "targets", "targets", ["targets"], {"targets": _list(target)}),
        "toolchains": _top(
            base, "toolchains", "toolchain list", ["toolchains"], {"toolchains": _list(toolchain)}
        ),
        "remote-sync": _top(
            base,
            "remote-sync",
            "push / pull",
            ["remote", "done", "present", "absent", "stats"],
            {
                "remote": {"type": "string", "description": "the remote cache URL"},
                "done": _list(_DIGEST),
                "present": _list(_DIGEST),
                "absent": _list(_DIGEST),
                "stats": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
            },
        ),
        "gc": _top(
            base,
            "gc",
            "gc",
            ["dry_run", "removed", "freed_bytes", "kept"],
            {
                "dry_run": {"type": "boolean"},
                "removed": _list({"type": "string"}),
                "freed_bytes": {"type": "integer", "minimum": 0},
                "kept": {"type": "integer", "minimum": 0},
                "dropped_records": {"type": "integer", "minimum": 0},
                "temp_removed": _list({"type": "string"}),
            },
        ),
        "audit": _top(
            base,
            "audit",
            "audit",
            ["entries", "summary"],
            {
                "command": {"type": "string"},
                "entries": _list(
                    _obj(
                        ["spec", "state", "source"], {"spec": {"type": "string"}, "state": {"type": "string"}}
                    )
                ),
                "summary": _list(
                    _obj(
                        ["spec", "target", "state"], {"spec": {"type": "string"}, "state": {"type": "string"}}
                    )
                ),
                "failing": _list({"type": "object"}),
                "filters": {"type": "object"},
                "warnings": _list({"type": "string"}),
            },
        ),
    }
