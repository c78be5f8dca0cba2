"""JSON Schemas of the machine outputs (plan --json, apply --json, lock files), written to schemas/.

`python -m reconciler.engine.output_schemas` rewrites them; `--check` exits 1 when a checked-in file is
stale (a test runs it), so the contract and the code cannot drift apart silently.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from backends.sdk.vocab import Verdict
from reconciler.engine import command_schemas
from reconciler.engine.health import HEALTH_STATES, STATUSES, SYNC_STATES
from reconciler.engine.stages import ORDER, VERIFY
from reconciler.spec.schema import SCHEMA_BASE
from reconciler.state.lockfile import FORMAT_VERSION as LOCK_FORMAT

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"
_BASE = SCHEMA_BASE
_DIGEST = {"type": "string", "pattern": "^[0-9a-f]{64}$"}

VERDICT: dict[str, Any] = {
    "type": "object",
    "required": [
        "name",
        "variant",
        "threshold",
        "comparison",
        "value",
        "passed",
        "evidence",
        "verdict",
        "detail",
    ],
    "properties": {
        "name": {"type": "string"},
        "variant": {"type": "string"},
        "threshold": {"type": "number"},
        "comparison": {"enum": ["<=", ">="]},
        "value": {"type": ["number", "null"]},
        "passed": {
            "type": ["boolean", "null"],
            "description": "true only when met on a measurement; null when unverified or met only on an estimate",
        },
        "evidence": {
            "type": ["string", "null"],
            "pattern": "^(measured:device|measured:host|estimated)( .*)?$",
        },
        "verdict": {"enum": [v.word for v in Verdict]},
        "detail": {"type": "string"},
        "carried_over": {
            "const": True,
            "description": "judged on evidence carried over from the committed lock, not re-verified here "
            "(absent otherwise; never in a lock file)",
        },
        "predicted": {
            "type": "string",
            "description": 'plan: how the outcome differs from the lock\'s ("pass -> fail", "new -> pass")',
        },
    },
    "additionalProperties": False,
}
SYNC = {"enum": list(SYNC_STATES), "description": "are the artifacts those the spec asks for"}
HEALTH = {"enum": list(HEALTH_STATES), "description": "are the SLOs met (Progressing: being measured)"}
MEASUREMENT: dict[str, Any] = {
    "type": "object",
    "required": ["value", "evidence"],
    "properties": {
        "value": {"type": ["number", "null"]},
        "evidence": {"type": "string"},
        "detail": {"type": "string"},
        "record": {"description": "key of the stage record it came from", **_DIGEST},
        "runner": {"type": "string", "description": "who measured: runner, device model/serial, CPU, python"},
        "digest": {"description": "sha256 over record, value, evidence, detail, runner", **_DIGEST},
        "measure": {
            "type": "string",
            "description": "accuracy: the task and its measure (`detection box_f1@0.5`, `generic cosine`)",
        },
        "on_target": {
            "type": "boolean",
            "description": "false: timed on a CPU for a target with an NPU (evidence about that CPU, never a pass)",
        },
        "host": {"type": "string", "description": "with on_target false: the runtime and CPU that measured"},
        "assumed": {
            "type": "string",
            "description": "what the value rests on that was neither measured nor published (an assumed clock): "
            "its verdict is never a pass or a fail",
        },
        "verdict": {
            "type": "string",
            "description": "with no value: the verdict it gives (unknown, unverified)",
        },
    },
}
ARTIFACT: dict[str, Any] = {
    "type": "object",
    "required": ["digest", "file", "size"],
    "properties": {"digest": _DIGEST, "file": {"type": "string"}, "size": {"type": "integer", "minimum": 0}},
    "additionalProperties": False,
}


def _stage(actions: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["name", "variant", "action", "reason"],
        "properties": {
            "name": {"enum": [*ORDER, VERIFY]},
            "variant": {"type": "string"},
            "action": {"enum": actions},
            "key": _DIGEST,
            "reason": {"type": "string"},
            "identity": {"type": "boolean"},
            "log": {"type": "string"},
            "duration_ms": {"type": "number"},
            "note": {"type": "string", "description": "apply: the backend's summary of a built stage"},
        },
        "additionalProperties": False,
    }


def _results(name: str, actions: list[str], statuses: list[str], description: str) -> dict[str, Any]:
    spec = {
        "type": "object",
        "required": ["name", "target", "stages", "slo", "status"],
        "properties": {
            "name": {"type": "string"},
            "file": {"type": "string"},
            "target": {"type": "string"},
            "status": {"enum": statuses},
            "sync": SYNC,
            "health": HEALTH,
            "carried_over": {"type": "array", "items": {"type": "string"}},
            "lock_problems": {"type": "array", "items": {"type": "string"}},
            "errors": {"type": "array", "items": {"type": "string"}},
            "ran_on": {"type": "string", "description": "apply --executor ray: the Ray node that built it"},
            "stages": {"type": "array", "items": _stage(actions)},
            "slo": {"type": "array", "items": VERDICT},
            "measurements": {
                "type": "object",
                "additionalProperties": {"type": "object", "additionalProperties": MEASUREMENT},
            },
        },
        "additionalProperties": False,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"{_BASE}{name}.schema.json",
        "title": f"npuctl {name} --json",
        "description": description,
        "type": "object",
        "required": ["format_version", "specs"],
        "properties": {
            "format_version": {"const": 1},
            "command": {"const": name},
            "specs": {"type": "array", "items": spec},
        },
        "additionalProperties": False,
    }


def _lock() -> dict[str, Any]:
    stage = {
        "type": "object",
        "required": ["key", "artifacts", "identity", "impl", "inputs"],
        "properties": {
            "key": _DIGEST,
            "artifacts": {"type": "object", "additionalProperties": ARTIFACT},
            "identity": {"type": "boolean"},
            "impl": {"type": "object"},
            "inputs": {
                "type": "object",
                "description": "the key inputs (key = sha256 of their canonical JSON): plan explains a "
                "changed key from them on any clone",
            },
        },
        "additionalProperties": False,
    }
    variant = {
        "type": "object",
        "required": ["inputs", "stages", "measurements", "verdicts"],
        "properties": {
            "inputs": {
                "type": "object",
                "additionalProperties": {"type": "array", "items": {"type": "integer"}},
            },
            "stages": {"type": "object", "additionalProperties": stage},
            "measurements": {"type": "object", "additionalProperties": MEASUREMENT},
            "verdicts": {"type": "array", "items": VERDICT},
            "other_measurements": {
                "type": "array",
                "description": "after `apply --remeasure`: other runners' measurements of the same build",
                "items": {
                    "type": "object",
                    "required": ["runner", "measurements"],
                    "properties": {
                        "runner": {"type": "string"},
                        "measurements": {"type": "object", "additionalProperties": MEASUREMENT},
                    },
                },
            },
            "verdicts_measured_on": {
                "type": ["string", "null"],
                "description": "the runner the verdicts used",
            },
        },
        "additionalProperties": False,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"{_BASE}lock.schema.json",
        "title": "npuctl lock file (specs/NAME.lock.json)",
        "description": "Written by apply, committed beside the spec. Deterministic: sorted keys, no timestamps.",
        "type": "object",
        "required": [
            "format_version",
            "spec",
            "file",
            "target",
            "model",
            "slo",
            "sync",
            "health",
            "variants",
        ],
        "properties": {
            "format_version": {"const": LOCK_FORMAT},
            "spec": {"type": "string"},
            "file": {"type": "string"},
            "target": {"type": "string"},
            "model": {
                "type": "object",
                "required": ["version", "import_key"],
                "properties": {
                    "version": {"type": ["string", "null"]},
                    "import_key": {"type": ["string", "null"]},
                },
            },
            "slo": {"type": ["object", "null"]},
            "sync": {
                "enum": ["Synced", "OutOfSync"],
                "description": "Synced: the recorded stages were built from this spec's fields and files",
            },
            "health": {"enum": ["Healthy", "Degraded", "Unknown"], "description": "of the recorded verdicts"},
            "variants": {"type": "object", "additionalProperties": variant},
            "sources": {
                "type": "object",
                "description": "What the lock was built from: digest of the merged spec section and of "
                "each input file (model, calibration_data, eval_data, labels); lets a reader without "
                "local state tell whether the lock still matches its spec",
                "properties": {
                    "spec_digest": _DIGEST,
                    "files": {"type": "object", "additionalProperties": {"type": ["string", "null"]}},
                },
            },
        },
        "additionalProperties": False,
    }


def _with_base(schema: dict[str, Any]) -> dict[str, Any]:
    """`plan --base REF` adds a `base` section: per spec the field diff, stages and SLO deltas against REF."""
    schema["properties"]["base"] = {
        "type": "object",
        "required": ["ref", "commit", "specs"],
        "properties": {
            "ref": {"type": "string"},
            "commit": {"type": "string"},
            "specs": {"type": "array", "items": {"type": "object", "required": ["name", "change"]}},
        },
    }
    return schema


def _status() -> dict[str, Any]:
    row = {
        "type": "object",
        "required": ["name", "target", "status", "sync", "health", "reason", "verdicts"],
        "properties": {
            "name": {"type": "string"},
            "target": {"type": "string"},
            "status": {"enum": list(STATUSES)},
            "sync": SYNC,
            "health": HEALTH,
            "reason": {"type": "string"},
            "carried_over": {"type": "array", "items": {"type": "string"}},
            "lock_problems": {"type": "array", "items": {"type": "string"}},
            "verdicts": {"type": "array", "items": {"type": "object"}},
            "slo_passed": {"type": "integer"},
            "slo_total": {"type": "integer"},
        },
        "additionalProperties": False,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"{_BASE}status.schema.json",
        "title": "npuctl status --json",
        "description": "`npuctl status --json`. Always exit 0.",
        "type": "object",
        "required": ["format_version", "specs"],
        "properties": {"format_version": {"const": 1}, "specs": {"type": "array", "items": row}},
        "additionalProperties": False,
    }


def schemas() -> dict[str, dict[str, Any]]:
    return {
        "apply": _results(
            "apply",
            ["built", "cached", "failed", "skipped"],
            list(STATUSES),
            "`npuctl apply --json`. Exit codes: 0 built and no SLO failed (SLOs met, met on an estimate or "
            "carried over), 3 an SLO failed or has no evidence (with --strict: any SLO not passed on a "
            "measurement), 1 error.",
        ),
        "plan": _with_base(
            _results(
                "plan",
                ["build", "cached", "rejudge", "stalled"],
                list(STATUSES),
                "`npuctl plan --json`. Exit codes: 0 nothing to do, 2 changes pending, 3 with "
                "--fail-on-regression an SLO would regress, 1 error (incl. a lock failing its integrity checks).",
            )
        ),
        "lock": _lock(),
        "status": _status(),
        **command_schemas.schemas(_BASE),
    }


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    stale = []
    for name, schema in schemas().items():
        path = SCHEMA_DIR / f"{name}.schema.json"
        text = render(schema)
        if "--check" in argv:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
    for stale_path in stale:
        print(f"{stale_path} is stale: run python -m reconciler.engine.output_schemas", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
