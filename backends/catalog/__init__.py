"""The target catalog: data files describing each NPU target and its operator-support table.

`targets/<id>.json` describes a target; `optables/<table>.json` is an op-support table derived from a
published vendor source, with that source's version. The version enters the build keys of the stages
that read the table, so a table update rebuilds exactly those.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

_HERE = Path(__file__).parent
SUPPORT_LEVELS = ("yes", "partial", "no", "unknown")
_TABLE_ID = re.compile(r"^[a-z0-9][a-z0-9.-]*$")


@dataclass(frozen=True)
class Target:
    id: str
    vendor: str
    chip: str
    npu: str
    backend: str
    """Default backend name (backends.registry)."""
    peak_tops_int8: float
    peak_tops_fp16: float
    bandwidth_gbps: float
    npu_cores: int
    precisions: tuple[str, ...]
    op_table: str
    """Id of the op-support table in optables/."""
    op_table_version: str
    default_activation: str = "uint8"
    """Activation type ptq uses when the spec does not say."""
    cpu_gflops: float = 50.0
    """Host-side CPU throughput of the board, for the fallback cost in estimates."""
    max_opset: int | None = None
    """The highest ONNX opset (default domain) the target's compiler loads; None where not stated. No
    rewrite lifts a model above it."""
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class OpSupport:
    op: str
    supported: str
    """yes | partial | no | unknown"""
    constraints: str


@dataclass(frozen=True)
class OpTable:
    id: str
    version: str
    """Source release and date plus a content hash: it enters the keys of the stages that read the table."""
    source: str
    ops: dict[str, OpSupport] = field(compare=False, hash=False)
    """ONNX default-domain op type -> support."""
    vendor_ops: dict[str, OpSupport] = field(default_factory=dict, compare=False, hash=False)
    """`domain:OpType` (e.g. com.microsoft:Gelu) -> support; `vendor:OpType` if the source names no domain."""
    unmapped: tuple[dict[str, str], ...] = field(default=(), compare=False, hash=False)
    """Source rows with no ONNX equivalent, kept verbatim with the reason (never guessed into an op)."""

    def lookup(self, op_type: str, domain: str = "") -> OpSupport | None:
        """Support of one node's op; None when the table does not list it (treat as unknown, not as no)."""
        if domain in ("", "ai.onnx") and op_type in self.ops:
            return self.ops[op_type]
        return self.vendor_ops.get(f"{domain}:{op_type}") or self.vendor_ops.get(f"vendor:{op_type}")

    def counts(self) -> dict[str, int]:
        """Number of default-domain ops per support level (yes/partial/no/unknown)."""
        out = dict.fromkeys(SUPPORT_LEVELS, 0)
        for row in self.ops.values():
            out[row.supported] = out.get(row.supported, 0) + 1
        return out


PLUGIN_GROUP = "npuctl.catalog"
"""Entry-point group of catalog plug-ins: each names a package whose folder holds `targets/*.json` and
`optables/*.json` in the built-in format. Built-in ids win over a plug-in's (a plug-in cannot redefine rk3588)."""


@cache
def plugin_folders() -> tuple[Path, ...]:
    """The catalog folders of the installed plug-ins (installed code, never a repository's)."""
    from backends.sdk import dists

    if not dists.may_declare(PLUGIN_GROUP):
        return ()
    from importlib.metadata import entry_points
    from importlib.resources import files

    folders = []
    for ep in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        try:
            folder = Path(str(files(ep.value)))
        except (ImportError, TypeError, ValueError):
            continue  # a broken plug-in never hides the built-in catalog; `npuctl backends` names it
        if folder.is_dir():
            folders.append(folder)
    return tuple(folders)


def _target(path: Path) -> Target:
    raw = json.loads(path.read_text(encoding="utf-8"))
    raw["precisions"] = tuple(raw.get("precisions", ()))
    known = set(Target.__dataclass_fields__)
    extra = {k: v for k, v in raw.items() if k not in known}
    return Target(**{k: v for k, v in raw.items() if k in known}, extra=extra)


@cache
def targets(plugins: bool = True) -> dict[str, Target]:
    """All catalog targets by id: the built-in ones, then those of installed plug-ins."""
    out: dict[str, Target] = {}
    for folder in (_HERE, *(plugin_folders() if plugins else ())):
        for path in sorted((folder / "targets").glob("*.json")):
            target = _target(path)
            out.setdefault(target.id, target)
    return out


def target(target_id: str) -> Target:
    """The target with this id; KeyError when unknown."""
    return targets()[target_id]


def did_you_mean(target_id: str) -> str | None:
    """The closest catalog id to a mistyped one, for one-line error messages."""
    import difflib

    wanted = target_id.lower()
    matches = difflib.get_close_matches(wanted, list(targets()), n=3, cutoff=0.5)
    return min(matches, key=lambda m: (_edits(wanted, m), matches.index(m))) if matches else None


def _edits(a: str, b: str) -> int:
    """Levenshtein distance: difflib's ratio alone prefers ethos-u85 to ethos-u55 for 'ethos-u56'."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def _support(rows: dict[str, Any]) -> dict[str, OpSupport]:
    return {name: OpSupport(name, row["supported"], row.get("constraints", "")) for name, row in rows.items()}


@cache
def op_table(table_id: str) -> OpTable:
    """The op-support table with this id (generated by tools/gen_optables.py); KeyError when unknown."""
    if not _TABLE_ID.match(table_id):
        raise KeyError(table_id)
    found = [f / "optables" / f"{table_id}.json" for f in (_HERE, *plugin_folders())]
    path = next((p for p in found if p.is_file()), None)
    if path is None:
        raise KeyError(table_id)
    raw = json.loads(path.read_text(encoding="utf-8"))
    return OpTable(
        raw["id"],
        raw["version"],
        raw["source"],
        _support(raw["ops"]),
        _support(raw.get("vendor_ops", {})),
        tuple(raw.get("unmapped", ())),
    )


def op_tables() -> list[str]:
    """Ids of every op table shipped with the catalog or an installed plug-in."""
    return sorted({p.stem for f in (_HERE, *plugin_folders()) for p in (f / "optables").glob("*.json")})
