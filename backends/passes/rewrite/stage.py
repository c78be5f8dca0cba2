"""The rewrite stage: replace what the target cannot run with equivalents it can, verified numerically.

For each rewrite in the library (backends.passes.rewrite.rules), in a fixed order, unless
`rewrite.disable` names it: find its matches, skip those touching `rewrite.exclude`, apply them to a
copy, place the copy on the target again and keep only the matches that lower the number of CPU nodes in
the region they replace (fusions: that do not raise it; cleanups always). A rewrite whose replacement
needs a higher opset than the target's compiler loads (`Target.max_opset`) is skipped: the model never
leaves what the compiler accepts. The kept set is verified with ONNX Runtime against the model before it
(max abs diff <= 1e-4) on the spec's own samples (backends.passes.rewrite.feeds); a family that fails is
rolled back and reported. Output bytes are deterministic: fixed order, fixed feeds, names derived from
the matched nodes.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.passes import placement as P
from backends.passes.rewrite.feeds import Feed, feeds_for_request
from backends.passes.rewrite.graph_edit import apply_matches, name_nodes
from backends.passes.rewrite.rules import CLEANUP, FUSION, REPLACE, Context, Match, Rewrite, registry
from backends.passes.rewrite.verify import Rejected, State, Verifier, finite_feeds, seeded_feeds
from backends.sdk.base import StageOutput, StageRequest
from backends.sdk.errors import TerminalError, one_line

if TYPE_CHECKING:
    import onnx

    from backends.catalog import Target
    from backends.passes.estimate import Precision

VERIFY_FEEDS = 3
"""Feeds every candidate is verified on (the first this many the float model answers finitely)."""
REPORT_NODES = 50
"""At most this many matched node names per rewrite in the stage report (the count is always exact)."""
Logger = Callable[[str], None]


def _dist(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "missing"


class RewritePass:
    """Stage "rewrite": config keys `rewrite`, `target`; inputs `model`, `placement`."""

    stage = "rewrite"

    def fingerprint(self) -> dict[str, str]:
        return {"onnx": _dist("onnx"), "onnxruntime": _dist("onnxruntime"), "numpy": _dist("numpy")}

    def run(self, request: StageRequest) -> StageOutput:
        import onnx

        cfg = _rewrite_config(request.config)
        placement_in = json.loads(Path(request.inputs["placement"]).read_text())
        model = onnx.load(str(request.inputs["model"]))
        lines: list[str] = []
        feeds, source = feeds_for_request(request, model, VERIFY_FEEDS)
        result = rewrite_model(
            model,
            request.target,
            placement_in["precision"],
            cfg,
            log=lines.append,
            feeds=feeds,
            source=source,
            vendor=placement_in,
        )
        out_model = request.workdir / "model.onnx"
        out_model.write_bytes(result.model.SerializeToString(deterministic=True))
        out_placement = request.workdir / "placement.json"
        out_placement.write_text(dump_json(result.placement))
        request.log.parent.mkdir(parents=True, exist_ok=True)
        request.log.write_text("\n".join(lines) + "\n")
        report = result.report()
        report["measurements"] = P.measurements(result.placement)
        before, after = result.coverage_before, result.coverage_after
        note = f"{len(result.fired)} rewrites fired; NPU coverage {before:.1%} -> {after:.1%}"
        return StageOutput(
            artifacts={"model": out_model, "placement": out_placement}, report=report, note=note
        )


def _rewrite_config(config: Mapping[str, Any]) -> dict[str, Any]:
    raw = config.get("rewrite")
    cfg: dict[str, Any] = dict(raw) if isinstance(raw, Mapping) else {}
    for key, value in config.items():
        if key.startswith("rewrite."):
            cfg[key.split(".", 1)[1]] = value
    return cfg


def dump_json(data: Any) -> str:
    """Deterministic JSON (sorted keys, fixed indentation, trailing newline)."""
    return json.dumps(data, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------- the engine


@dataclass
class Fired:
    name: str
    family: str
    kind: str
    nodes: list[str]
    count: int
    max_abs_diff: float


@dataclass
class Result:
    model: onnx.ModelProto
    placement: dict[str, Any]
    coverage_before: float
    coverage_after: float
    fired: list[Fired] = field(default_factory=list)
    rolled_back: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    before: dict[str, Any] = field(default_factory=dict)
    max_abs_diff: float = 0.0
    """Graph outputs of the final model against the original, on the verifier's inputs."""
    feed_source: str = ""
    feeds: list[str] = field(default_factory=list)
    """The names of the feeds every rewrite was verified on."""
    rejected_feeds: list[Rejected] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        cov_b, cov_a = self.before["coverage"], self.placement["coverage"]
        return {
            "rewrites": [
                {
                    "name": f.name,
                    "family": f.family,
                    "kind": f.kind,
                    "count": f.count,
                    "nodes": f.nodes[:REPORT_NODES],
                    "nodes_truncated": len(f.nodes) > REPORT_NODES,
                    "max_abs_diff": f.max_abs_diff,
                }
                for f in self.fired
            ],
            "rolled_back": self.rolled_back,
            "max_abs_diff": self.max_abs_diff,
            "verified_on": {
                "source": self.feed_source,
                "feeds": self.feeds,
                "rejected": [
                    {"name": r.name, "reason": f"the float model outputs NaN/Inf at {', '.join(r.outputs)}"}
                    for r in self.rejected_feeds
                ],
            },
            "skipped": self.skipped,
            "coverage": {
                "nodes": {"before": cov_b["nodes"]["fraction"], "after": cov_a["nodes"]["fraction"]},
                "macs": {"before": cov_b["macs"]["fraction"], "after": cov_a["macs"]["fraction"]},
                "cpu_nodes": {
                    "before": cov_b["nodes"]["total"] - cov_b["nodes"]["npu"],
                    "after": cov_a["nodes"]["total"] - cov_a["nodes"]["npu"],
                },
            },
            "estimate_ms": {
                "before": self.before["estimate"]["latency_ms"],
                "after": self.placement["estimate"]["latency_ms"],
            },
        }


def precision_from_json(raw: Mapping[str, Any]) -> Precision:
    from backends.passes.estimate import Precision

    return Precision(
        mode=raw["mode"],
        npu_dtype=raw["npu_dtype"],
        activations=raw["activations"],
        weights=raw["weights"],
        activation_bytes=int(raw["activation_bytes"]),
        weight_bytes=int(raw["weight_bytes"]),
        peak_tops=float(raw["peak_tops"]),
        note=raw.get("note", ""),
    )


@dataclass
class _Env:
    """Everything fixed during one rewrite run."""

    target: Target
    precision: Precision
    table: Any
    fusion: dict[str, bool]
    exclude: list[str]
    verifier: Verifier
    result: Result
    log: Logger
    vendor: Mapping[str, str] = field(default_factory=dict)
    """node name -> device where the check stage's placement came from the vendor tool's own
    validation: it wins over the op table for the nodes it names (the nodes a rewrite adds are new
    names, placed by the table)."""
    vendor_source: str = ""
    cache: dict[tuple[Any, ...], P.Decision] = field(default_factory=dict)

    def analyse(self, model: onnx.ModelProto) -> State:
        from backends.passes.facts import analyse

        facts = analyse(model)
        decisions = P.table_decisions(facts, self.target, self.precision, self.cache)
        if self.vendor:
            decisions = P.backend_decisions(facts, self.vendor, self.vendor_source, decisions)
        return State(model, facts, decisions)


def rewrite_model(
    model: onnx.ModelProto,
    target: Target,
    precision: Precision | Mapping[str, Any],
    config: Mapping[str, Any],
    *,
    log: Logger = print,
    rewrites: Sequence[Rewrite] | None = None,
    feeds: Sequence[Feed] | None = None,
    source: str = "",
    vendor: Mapping[str, Any] | None = None,
) -> Result:
    """Rewrites `model` for `target`. `config` is the spec's `rewrite` section (fusion, exclude,
    disable); `precision` is check's (placement.json "precision") or an estimate.Precision. `feeds`
    (named, from `source`) are what rewrites are verified on; without them, seeded feeds. `vendor` is
    the check stage's placement report: the nodes a vendor tool placed itself keep its verdict."""
    import onnx

    from backends.catalog import op_table
    from backends.passes.estimate import Precision

    if not isinstance(precision, Precision):
        precision = precision_from_json(precision)
    work = onnx.ModelProto()
    work.CopyFrom(model)
    name_nodes(work)
    exclude = [str(p) for p in config.get("exclude") or []]
    _check_exclude(work, exclude)
    table = op_table(target.op_table)
    table_source = P.table_source(table)
    result = Result(work, {}, 0.0, 0.0)
    verifier = _verifier(work, feeds, source, result, log)
    fusion = {k: bool(v) for k, v in dict(config.get("fusion") or {}).items()}
    disabled = {str(n) for n in config.get("disable") or []}
    by_tool, tool = vendor_devices(vendor or {})
    env = _Env(target, precision, table, fusion, exclude, verifier, result, log, by_tool, tool)
    state = env.analyse(work)
    before = P.build_report(state.facts, target, precision, state.decisions, table_source)
    result.before = before
    for rw in rewrites if rewrites is not None else registry():
        if rw.name in disabled:
            result.skipped.append({"name": rw.name, "reason": "rewrite.disable names it"})
            continue
        if not rw.enabled(fusion):
            result.skipped.append({"name": rw.name, "reason": f"rewrite.fusion.{rw.switch} is false"})
            continue
        if rw.kind == REPLACE and target.npu_cores == 0:
            continue  # nothing can move to an NPU the target does not have
        state = _run_one(rw, state, env)
    result.model = state.model
    result.max_abs_diff = float(f"{verifier.total():.3g}") if result.fired else 0.0
    result.placement = P.build_report(state.facts, target, precision, state.decisions, table_source)
    result.coverage_before = before["coverage"]["nodes"]["fraction"] or 0.0
    result.coverage_after = result.placement["coverage"]["nodes"]["fraction"] or 0.0
    result.skipped.append(
        {
            "name": "conv_activation",
            "reason": "no standard ONNX fused op: left to the target's compiler "
            "(compile reads rewrite.fusion)",
        }
    )
    log(f"coverage {result.coverage_before:.4f} -> {result.coverage_after:.4f}")
    return result


def vendor_devices(placement: Mapping[str, Any]) -> tuple[dict[str, str], str]:
    """(node name -> device, the tool) for the nodes of a placement report that a vendor tool placed
    (support "backend"), not the op table."""
    found = {
        str(n["name"]): str(n["device"])
        for n in placement.get("nodes") or []
        if n.get("support") == "backend" and n.get("device")
    }
    sources = {str(n.get("source")) for n in placement.get("nodes") or [] if n.get("support") == "backend"}
    return found, ", ".join(sorted(sources))


def _verifier(
    model: onnx.ModelProto, feeds: Sequence[Feed] | None, source: str, result: Result, log: Logger
) -> Verifier:
    """The verifier on the first VERIFY_FEEDS feeds the float model answers finitely; a feed that makes
    it output NaN or Inf is reported and never used (no difference can be judged on it)."""
    named = list(feeds) if feeds is not None else seeded_feeds(model)
    result.feed_source = source or "seeded random feeds"
    try:
        kept, rejected = finite_feeds(model, named, VERIFY_FEEDS)
        result.rejected_feeds = rejected
        for r in rejected:
            log(f"feed {r.name}: the float model outputs NaN/Inf at {', '.join(r.outputs)}; not used")
        if not kept:
            raise TerminalError(
                f"rewrite: the float model outputs NaN/Inf on every feed of {result.feed_source} "
                f"({', '.join(r.name for r in rejected)}), so no rewrite can be verified; give "
                "quantization.calibration.data or evaluate.data samples the model answers finitely"
            )
        result.feeds = [name for name, _ in kept]
        return Verifier(model, [feed for _, feed in kept])
    except TerminalError:
        raise
    except Exception as exc:
        raise TerminalError(
            f"rewrite: the model does not run on ONNX Runtime, so no rewrite can be "
            f"verified: {one_line(exc, 200)}"
        ) from exc


def _check_exclude(model: onnx.ModelProto, patterns: Sequence[str]) -> None:
    names = [n.name for n in model.graph.node]
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
            raise TerminalError(f"spec.rewrite.exclude: {pattern!r} matches no node of the model")


def _excluded(ctx: Context, m: Match, patterns: Sequence[str]) -> bool:
    names = [ctx.facts.names[i] for i in m.nodes]
    return any(fnmatch.fnmatchcase(n, p) for n in names for p in patterns)


def _non_overlapping(matches: Sequence[Match]) -> list[Match]:
    taken: set[int] = set()
    out = []
    for m in matches:
        if taken.isdisjoint(m.nodes):
            taken.update(m.nodes)
            out.append(m)
    return out


def _cpu_count(state: State, indexes: Sequence[int]) -> int:
    return sum(
        1 for i in indexes if state.decisions.get(i) is not None and state.decisions[i].device == P.CPU
    )


def _new_cpu_count(state: State, m: Match) -> int:
    by_name = {n: i for i, n in enumerate(state.facts.names)}
    count = 0
    for node in m.new_nodes:
        i = by_name.get(node.name)
        if i is not None and i in state.decisions and state.decisions[i].device == P.CPU:
            count += 1
    return count


def _matches(rw: Rewrite, state: State, env: _Env) -> list[Match]:
    devices = {i: d.device for i, d in state.decisions.items()}
    cctx = P.context_for(env.precision, state.facts)
    ctx = Context(state.model, state.facts, devices, env.table, cctx, env.fusion)
    found = _non_overlapping([m for m in rw.find(ctx) if not _excluded(ctx, m, env.exclude)])
    if rw.kind == REPLACE:  # only a region with a CPU node can gain
        found = [m for m in found if _cpu_count(state, m.nodes) > 0]
    return found


def _run_one(rw: Rewrite, state: State, env: _Env) -> State:
    """Applies one rewrite where it raises placement; returns the new state (or `state` unchanged)."""
    matches = _matches(rw, state, env)
    if not matches:
        return state
    base = state
    if state.facts.opset < rw.min_opset:
        ceiling = env.target.max_opset
        if ceiling is not None and rw.min_opset > ceiling:
            reason = f"needs opset {rw.min_opset}; {env.target.id}'s compiler loads opset <= {ceiling}"
            env.log(f"{rw.name}: {len(matches)} matches skipped: {reason}")
            env.result.skipped.append({"name": rw.name, "reason": reason})
            return state
        upgraded = _upgrade(state.model, rw.min_opset, env.log)
        if upgraded is None:
            return state
        base = env.analyse(upgraded)
        matches = _matches(rw, base, env)
        if not matches:
            return state
    candidate = env.analyse(apply_matches(base.model, matches))
    if rw.kind != CLEANUP:
        kept = []
        for m in matches:
            old, new = _cpu_count(base, m.nodes), _new_cpu_count(candidate, m)
            if new < old or (rw.kind == FUSION and new <= old):
                kept.append(m)
        if not kept:
            env.log(f"{rw.name}: {len(matches)} matches, none raises placement on {env.target.id}")
            return state
        if len(kept) != len(matches):
            candidate = env.analyse(apply_matches(base.model, kept))
        matches = kept
    ok, diff = env.verifier.check(base, candidate.model, [] if rw.exact else matches)
    anchors = sorted({m.anchor for m in matches})
    if not ok:
        env.log(f"{rw.name}: verification failed (max abs diff {diff:g}); rolled back")
        env.result.rolled_back.append({"name": rw.name, "nodes": anchors, "max_abs_diff": _finite(diff)})
        return state
    env.verifier.accept()
    env.log(f"{rw.name}: fired on {len(matches)} matches, max abs diff {diff:.3g}")
    env.result.fired.append(Fired(rw.name, rw.family, rw.kind, anchors, len(matches), float(f"{diff:.3g}")))
    return candidate


def _upgrade(model: onnx.ModelProto, opset: int, log: Logger) -> onnx.ModelProto | None:
    """The model converted to `opset` (onnx version converter), or None when conversion fails."""
    from onnx import version_converter

    try:
        out = version_converter.convert_version(model, opset)
    except Exception as exc:
        log(f"opset upgrade to {opset} failed: {one_line(exc, 200)}")
        return None
    del out.graph.value_info[:]
    name_nodes(out)
    return out


def _finite(x: float) -> float | None:
    return None if x != x or x in (float("inf"), float("-inf")) else float(f"{x:.3g}")
