#!/usr/bin/env python3
"""Generate the catalog's op-support tables (backends/catalog/optables/*.json).

Inputs: a folder of published vendor tables normalized to ONNX op names (CSV columns
`onnx_op, supported, constraints, source`, one file per NPU family; see SOURCES.md there), plus the
ONNX Runtime CPU kernel registry for the `cpu` table. Output: one JSON file per table, deterministic
(sorted keys, no timestamps) and checked in, because users' machines do not have the source folder.

Each table's `version` names the source's version and date plus a short hash of the normalized
content: the check and rewrite stages put that version into their build keys, so any change to a
table (a new source release, or a fix to the normalization below) rebuilds exactly what read it.

The published tables it reads are checked in beside it (tools/opsupport, with SOURCES.md naming each
table's origin and version), so the catalog reproduces from a fresh clone.

Usage:
    python tools/gen_optables.py [SOURCE_DIR] [--out backends/catalog/optables] [--check] [--no-cpu]

`--check` writes nothing and exits 1 when a checked-in file differs from what would be generated.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SOURCE_DIR = REPO / "tools" / "opsupport"
"""The published vendor tables, normalized to ONNX op names (checked in; see SOURCES.md there)."""
DEFAULT_OUT = REPO / "backends" / "catalog" / "optables"
SUPPORT_LEVELS = ("yes", "partial", "no", "unknown")
VENDOR_ANY = "vendor"
"""Domain label of vendor-specific op names whose ONNX domain the source does not give."""


@dataclass(frozen=True)
class Source:
    """What the CSV file itself does not say: the table id, and the source's version and date."""

    table_id: str
    release: str
    date: str
    title: str


SOURCES: dict[str, Source] = {
    "qualcomm_qnn_htp.csv": Source(
        "qualcomm-qnn-htp",
        "qnn-ep-2.5.0+qairt-2.49.40",
        "2026-03",
        "ONNX Runtime QNN EP 2.5.0 (QAIRT 2.49.40, ORT 1.26.0) supported-operator table, HTP backend; "
        "constraints read off the EP's op builders (onnxruntime-qnn@cee6c0d91e, 2026-03-13)",
    ),
    "android_nnapi_ort.csv": Source(
        "android-nnapi-ort",
        "ort-nnapi-ops@517c7fdfde",
        "2023-12-20",
        "ONNX Runtime NNAPI EP supported ops (tools/ci_build/github/android/nnapi_supported_ops.md) "
        "plus constraints from its op builders",
    ),
    "apple_coreml_ort.csv": Source(
        "apple-coreml-ort",
        "ort-coreml-ops@04f568d869+21272218e4",
        "2025-10-31",
        "ONNX Runtime CoreML EP supported ops, MLProgram (2025-10-31) and NeuralNetwork (2024-08-08) lists",
    ),
    "rockchip_rk3588_rknpu2.csv": Source(
        "rockchip-rknpu2",
        "rknn-toolkit2-2.3.2",
        "2025-03-28",
        "airockchip/rknn-toolkit2 v2.3.2: RKNNToolKit2_OP_Support-2.3.2.md and "
        "05_RKNN_Compiler_Support_Operator_List_V2.3.2.pdf (RK3588 column; RKNPU2 family)",
    ),
    "arm_ethos_u55_u65.csv": Source(
        "arm-ethos-u55-u65",
        "vela-5.2.0",
        "undated",
        "ethos-u-vela 5.2.0 `vela --supported-ops-report` for Ethos-U55/U65, TFLite ops mapped to ONNX "
        "(mapping inferred)",
    ),
    "arm_ethos_u85.csv": Source(
        "arm-ethos-u85",
        "vela-5.2.0",
        "undated",
        "ethos-u-vela 5.2.0 `vela --supported-ops-report` for Ethos-U85, TFLite ops mapped to ONNX "
        "(mapping inferred)",
    ),
    "intel_npu_openvino.csv": Source(
        "intel-npu-openvino",
        "openvino-2024.4-conformance",
        "2024-08-08",
        "OpenVINO operation conformance report (opset_report_omz_static, OV master_2024.4.0), NPU column, "
        "OpenVINO ops mapped to ONNX (mapping inferred)",
    ),
    "huawei_ascend_cann.csv": Source(
        "huawei-ascend-cann",
        "cann-8.0.0",
        "undated",
        "Huawei CANN 8.0.0 commercial 'Supported ONNX operator list' (operatorlist_00176); names only, "
        "no per-op constraints",
    ),
    "mediatek_mdla3_mt8188_PARTIAL.csv": Source(
        "mediatek-mdla3-partial",
        "aiot-dev-guide-mdla3.0-mt8188-excerpt",
        "undated",
        "MediaTek Genio AIoT developer guide, MT8188 MDLA 3.0 supported operations: the first 24 rows "
        "only (table truncated after Pow), TFLite ops mapped to ONNX (mapping inferred)",
    ),
}
"""CSV file name -> table metadata. A CSV not listed here is an error: someone must date it."""

ALIASES: dict[str, list[tuple[str, str]]] = {
    "Gemm / MatMul(const B)": [("Gemm", ""), ("MatMul", "only with a constant B")],
    "LpPool(p=2)": [("LpPool", "p=2 only")],
    "ReduceMean / GlobalAveragePool": [("ReduceMean", ""), ("GlobalAveragePool", "")],
    "Pad (reflect)": [("Pad", "mode=reflect")],
    "Inverse": [("com.microsoft:Inverse", "not an ONNX default-domain op; ORT contrib op")],
}
"""Source rows whose op name is not a plain ONNX op type -> (ONNX op or `domain:op`, qualifier)."""

UNMAPPED: dict[str, str] = {
    "BatchToSpace(n/a ONNX; DepthToSpace-like)": "ONNX has no BatchToSpace; DepthToSpace is a different op",
    "Concat of Unsqueeze (TFLite PACK)": "a two-op pattern, not one ONNX op",
}
"""Source rows with no ONNX op equivalent -> why; kept in the table's `unmapped` list, never guessed."""

_DOMAIN_SUFFIX = re.compile(r"^(?P<op>[A-Za-z][A-Za-z0-9_]*) \((?P<domain>[a-z][a-z0-9.]*)\)$")
_NONSTANDARD_NOTE = "non-standard ONNX op name"


def onnx_op_types() -> frozenset[str]:
    """Every op type of the ONNX default domain, in any opset (deprecated ones included)."""
    import onnx.defs

    return frozenset(s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain in ("", "ai.onnx"))


def merge_support(levels: Iterable[str]) -> str:
    """Several source rows for one op: equal levels stay, any disagreement is `partial`."""
    distinct = set(levels)
    return distinct.pop() if len(distinct) == 1 else "partial"


def _qualified(qualifier: str, raw: str, constraints: str) -> str:
    note = f"[source row '{raw}'{': ' + qualifier if qualifier else ''}]"
    return f"{note} {constraints}".strip()


def _targets_of(raw: str, constraints: str, known: frozenset[str]) -> list[tuple[str, str]]:
    """(key, constraints) pairs a source row contributes; key is an op type or `domain:op`."""
    if raw in ALIASES:
        return [(key, _qualified(q, raw, constraints)) for key, q in ALIASES[raw]]
    match = _DOMAIN_SUFFIX.match(raw)
    if match:
        return [(f"{match['domain']}:{match['op']}", constraints)]
    if raw in known:
        return [(raw, constraints)]
    if _NONSTANDARD_NOTE in constraints:
        return [(f"{VENDOR_ANY}:{raw}", constraints)]
    raise ValueError(f"op {raw!r} is not an ONNX op type: add it to ALIASES or UNMAPPED in {__file__}")


def _read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        if row["supported"] not in SUPPORT_LEVELS:
            raise ValueError(f"{path.name}: {row['onnx_op']}: supported={row['supported']!r}")
    return rows


def _primary_source(rows: list[dict[str, str]]) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["source"]] = counts.get(row["source"], 0) + 1
    return min(counts, key=lambda s: (-counts[s], s))


def normalize(rows: list[dict[str, str]], known: frozenset[str]) -> dict[str, Any]:
    """The table body (ops, vendor_ops, unmapped) from the CSV rows, without id or version."""
    primary = _primary_source(rows)
    grouped: dict[str, list[dict[str, str]]] = {}
    unmapped: list[dict[str, str]] = []
    for row in rows:
        raw = row["onnx_op"].strip()
        if raw in UNMAPPED:
            unmapped.append(
                {
                    "row": raw,
                    "supported": row["supported"],
                    "constraints": row["constraints"],
                    "why": UNMAPPED[raw],
                }
            )
            continue
        for key, constraints in _targets_of(raw, row["constraints"], known):
            grouped.setdefault(key, []).append({**row, "constraints": constraints})
    ops: dict[str, Any] = {}
    vendor_ops: dict[str, Any] = {}
    for key, group in grouped.items():
        entry: dict[str, str] = {
            "supported": merge_support(r["supported"] for r in group),
            "constraints": " || ".join(r["constraints"] for r in group if r["constraints"]),
        }
        sources = sorted({r["source"] for r in group} - {primary})
        if sources:
            entry["source"] = " + ".join(sources)
        (vendor_ops if ":" in key else ops)[key] = entry
    return {
        "primary_row_source": primary,
        "ops": ops,
        "vendor_ops": vendor_ops,
        "unmapped": sorted(unmapped, key=lambda u: u["row"]),
    }


def content_hash(body: dict[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def finish(table_id: str, release: str, date: str, title: str, body: dict[str, Any]) -> dict[str, Any]:
    """Adds id, source and the version (release, date and content hash) to a table body."""
    digest = content_hash({"id": table_id, "source": title, **body})
    return {
        "id": table_id,
        "version": f"{release}{f' ({date})' if date else ''} sha256:{digest}",
        "source": title,
        **body,
    }


def vendor_table(path: Path, known: frozenset[str]) -> dict[str, Any]:
    meta = SOURCES.get(path.name)
    if meta is None:
        raise ValueError(f"{path.name}: no entry in SOURCES of {__file__} (table id, release, date)")
    body = normalize(_read_rows(path), known)
    return finish(meta.table_id, meta.release, meta.date, meta.title, body)


def _types(kernel: Any) -> str:
    parts = []
    for name, types in sorted(kernel.type_constraints.items()):
        short = sorted(t.replace("tensor(", "").replace(")", "") for t in types)
        parts.append(f"{name}: {', '.join(short)}")
    return "; ".join(parts)


def cpu_table() -> dict[str, Any]:
    """Every ONNX default-domain op, judged against ONNX Runtime's CPU kernel registry.

    yes: a CPU kernel covers the op's newest ONNX version, or the op is an ONNX function ORT expands;
    partial: CPU kernels exist only for older versions of the op (convert the model's opset);
    no: no CPU kernel and no function body.
    """
    import onnx
    import onnx.defs
    import onnxruntime
    from onnxruntime.capi import _pybind_state

    kernels: dict[str, list[Any]] = {}
    for k in _pybind_state.get_all_opkernel_def():
        if k.provider == "CPUExecutionProvider" and k.domain in ("", "ai.onnx"):
            kernels.setdefault(k.op_name, []).append(k)
    ops: dict[str, Any] = {}
    for schema in sorted(onnx.defs.get_all_schemas(), key=lambda s: s.name):
        if schema.domain not in ("", "ai.onnx"):
            continue
        ops[schema.name] = _cpu_entry(schema, kernels.get(schema.name, []))
    body = {"primary_row_source": "", "ops": ops, "vendor_ops": {}, "unmapped": []}
    release = f"onnx-{onnx.__version__}+onnxruntime-{onnxruntime.__version__}"
    title = (
        f"ONNX {onnx.__version__} default-domain schemas (onnx.defs.get_all_schemas) checked against the "
        f"CPUExecutionProvider kernel registry of onnxruntime {onnxruntime.__version__}"
    )
    return finish("cpu", release, "", title, body)


def _cpu_entry(schema: Any, kernels: list[Any]) -> dict[str, str]:
    since = schema.since_version
    if schema.name in _NO_KERNEL_NEEDED:
        return {"supported": "yes", "constraints": _NO_KERNEL_NEEDED[schema.name]}
    if kernels and schema.deprecated:
        newest = max(k.version_range[1] for k in kernels)
        return {
            "supported": "partial",
            "constraints": f"deprecated in ONNX since opset {since}; CPU kernels up to opset {newest}",
        }
    if kernels:
        covering = [k for k in kernels if k.version_range[0] <= since <= k.version_range[1]]
        newest = max(k.version_range[1] for k in kernels)
        oldest = min(k.version_range[0] for k in kernels)
        if covering:
            return {"supported": "yes", "constraints": f"opset {since}+ kernel; {_types(covering[0])}"}
        return {
            "supported": "partial",
            "constraints": f"CPU kernels for opsets {oldest}-{min(newest, since - 1)} only; "
            f"the opset-{since} version has none (convert the model to an older opset)",
        }
    if schema.has_function or schema.has_context_dependent_function:
        return {"supported": "yes", "constraints": f"no kernel; runs as its ONNX function (opset {since})"}
    if schema.deprecated:
        return {"supported": "no", "constraints": "deprecated in ONNX; no CPU kernel"}
    return {"supported": "no", "constraints": "no CPU kernel in this onnxruntime"}


_NO_KERNEL_NEEDED = {"Constant": "no kernel needed: ONNX Runtime turns Constant nodes into initializers"}


def render(table: dict[str, Any]) -> str:
    return json.dumps(table, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def generate(source_dir: Path, with_cpu: bool = True) -> dict[str, str]:
    """File name -> file text, for every CSV in source_dir (and the cpu table)."""
    known = onnx_op_types()
    out: dict[str, str] = {}
    for path in sorted(source_dir.glob("*.csv")):
        table = vendor_table(path, known)
        out[f"{table['id']}.json"] = render(table)
    if with_cpu:
        out["cpu.json"] = render(cpu_table())
    return out


def sync_targets(targets_dir: Path, tables: dict[str, str]) -> dict[str, str]:
    """Target file name -> text with `op_table_version` set to its table's new version.

    Only targets whose version changes are returned; a target naming a table that does not exist is an
    error, so a renamed table cannot leave a target pointing nowhere.
    """
    versions = {json.loads(text)["id"]: json.loads(text)["version"] for text in tables.values()}
    out: dict[str, str] = {}
    for path in sorted(targets_dir.glob("*.json")):
        target = json.loads(path.read_text(encoding="utf-8"))
        table = target.get("op_table")
        if table not in versions:
            if table is not None and (path.parent.parent / "optables" / f"{table}.json").exists():
                continue  # a table this run did not regenerate (e.g. --no-cpu)
            raise ValueError(f"{path.name}: op_table {table!r} is not a generated table")
        if target.get("op_table_version") != versions[table]:
            target["op_table_version"] = versions[table]
            out[path.name] = render(target)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "source_dir",
        type=Path,
        nargs="?",
        default=SOURCE_DIR,
        help="folder of opsupport CSV files (see SOURCES.md there); default: tools/opsupport",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="output folder (default: the catalog's)"
    )
    parser.add_argument("--check", action="store_true", help="compare with the files in --out; write nothing")
    parser.add_argument("--no-cpu", action="store_true", help="skip the ONNX Runtime cpu table")
    args = parser.parse_args(argv)
    if not args.source_dir.is_dir():
        print(f"error: {args.source_dir} is not a folder", file=sys.stderr)
        return 1
    try:
        files = generate(args.source_dir, with_cpu=not args.no_cpu)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    writes = {args.out / name: text for name, text in files.items() if _read(args.out / name) != text}
    targets_dir = args.out.parent / "targets"
    if targets_dir.is_dir():
        try:
            writes.update({targets_dir / n: t for n, t in sync_targets(targets_dir, files).items()})
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    if args.check:
        for path in sorted(writes):
            print(f"stale: {path}")
        return 1 if writes else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for path in sorted(writes):
        path.write_text(writes[path], encoding="utf-8")
        print(f"wrote {path}")
    return 0


def _read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.exists() else None


if __name__ == "__main__":
    sys.exit(main())
