"""What the other commands print with `--json`: validate, artifacts, backends, explain, targets,
toolchain list, push/pull, gc and audit.

Each pins the top-level shape and the fields scripts read. Fields may be added (the contract: add
freely, never rename), so only the top level forbids unknown keys, where a typo would hide a field.
"""

from __future__ import annotations

from typing import Any, Literal

from reconciler.records._base import Count, Digest, Omittable, OpenRecord, Record, described, optional


class SpecError(OpenRecord):
    """One finding, located in its file."""

    file: str
    line: Count
    column: Count
    field: str
    message: str


class ValidatedSpec(OpenRecord):
    file: str
    name: str | None
    valid: bool
    errors: list[SpecError]


class ValidatedBase(OpenRecord):
    file: str
    valid: bool
    errors: list[SpecError]


class ValidateOutput(Record):
    format_version: Literal[1]
    specs: list[ValidatedSpec]
    bases: Omittable[list[ValidatedBase]] = optional()
    lock_problems: Omittable[list[str]] = optional("file: field: what does not match")


class ArtifactRow(OpenRecord):
    variant: str
    inputs: dict[str, list[int]]
    file: str
    name: str
    size: Count
    sha256: Digest
    entry: bool = described("the file an app opens first")
    path: str | None = described("in the local store; null: only the lock records it")


class ArtifactsOutput(Record):
    format_version: Literal[1]
    spec: str | None
    artifacts: list[ArtifactRow]


class BackendRow(OpenRecord):
    name: str
    origin: str = described("built-in, or `plug-in DIST VERSION`")
    module: str
    targets: list[str]
    toolchain: str = described("ready, or what to install")
    stages: list[str]
    evidence: str


class BackendsOutput(Record):
    format_version: Literal[1]
    backends: list[BackendRow]
    catalog_plugins: list[str]


class Disagreement(OpenRecord):
    node: str
    op_type: str
    op_table: str = described("where npuctl's op table placed the node (NPU or CPU)")
    tool: str = described("where the vendor tool placed it, from its own report of the build")
    tool_name: str
    won: str = described("whose placement the record holds: the vendor tool's")


class ExplainedStage(OpenRecord):
    stage: str
    variant: str
    key: str | None
    last_key: str | None = optional()
    up_to_date: bool
    identity: Omittable[bool] = optional()
    inputs: list[dict[str, Any]]
    disagreements: Omittable[list[Disagreement]] = optional(
        "nodes where the op table and the vendor tool the stage ran place differently"
    )


class ExplainOutput(Record):
    format_version: Literal[1]
    spec: str
    stages: list[ExplainedStage]


class BuiltBy(OpenRecord):
    backend: Any
    toolchain: Any
    evidence: Any


class TargetRow(OpenRecord):
    id: str
    vendor: Any
    chip: Any
    npu: Any
    backend: str
    op_table: str
    built_by: BuiltBy
    op_support: dict[str, int]


class TargetsOutput(Record):
    format_version: Literal[1]
    targets: list[TargetRow]


class ToolchainRow(OpenRecord):
    name: str
    version: str
    installed: bool
    path: str


class ToolchainsOutput(Record):
    format_version: Literal[1]
    toolchains: list[ToolchainRow]


class RemoteSyncOutput(Record):
    format_version: Literal[1]
    remote: str = described("the remote cache URL")
    done: list[Digest]
    present: list[Digest]
    absent: list[Digest]
    unreadable: Omittable[list[str]] = optional(
        "lock files that could not be read (FILE:LINE:COL: why): their specs were skipped, exit 1"
    )
    present_by_record: Omittable[bool] = optional(
        "push: `present` is this machine's record of what it pushed, fetched or saw listed there, not "
        "an answer of the remote (it was not asked; `--verify` asks it)"
    )
    stats: dict[str, Count]


class GcOutput(Record):
    format_version: Literal[1]
    dry_run: bool
    removed: list[str]
    freed_bytes: Count
    kept: Count
    dropped_records: Omittable[Count] = optional()
    temp_removed: Omittable[list[str]] = optional()


class AuditEntry(OpenRecord):
    spec: str
    state: str
    source: Any


class AuditSummaryRow(OpenRecord):
    spec: str
    target: Any
    state: str


class AuditOutput(Record):
    format_version: Literal[1]
    command: Omittable[str] = optional()
    entries: list[AuditEntry]
    summary: list[AuditSummaryRow]
    failing: Omittable[list[dict[str, Any]]] = optional()
    filters: Omittable[dict[str, Any]] = optional()
    warnings: Omittable[list[str]] = optional()
