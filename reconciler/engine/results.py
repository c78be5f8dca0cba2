"""What plan and apply report: per stage an action with its reason, per SLO a verdict with evidence."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from reconciler.engine import throughput
from reconciler.engine.health import STALLED, UNKNOWN
from reconciler.records import measured as measured_view
from reconciler.records.judged import Judged


@dataclass
class StageResult:
    name: str
    variant: str
    action: str
    """plan: build | cached | rejudge; apply: built | cached | failed | skipped"""
    key: str | None
    reason: str
    identity: bool = False
    log: str | None = None
    duration_ms: float | None = None
    note: str | None = None
    """apply, built stages: the backend's one-line summary of what it did (e.g. kept layers, cache hit)."""

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class SpecResult:
    name: str
    file: str
    target: str
    stages: list[StageResult] = field(default_factory=list)
    slo: list[Judged] = field(default_factory=list)
    status: str = UNKNOWN
    """One word from reconciler.engine.health.status: Stalled | Failed | OutOfSync | <health>"""
    sync: str = UNKNOWN
    """Synced | OutOfSync | Unknown"""
    health: str = UNKNOWN
    """Healthy | Degraded | Progressing | Unknown"""
    carried_over: list[str] = field(default_factory=list)
    """What stands on committed evidence not re-verified here ("default/compile: <why>")."""
    lock_problems: list[str] = field(default_factory=list)
    """Integrity findings on the committed lock file ("specs/x.lock.json: field: why")."""
    errors: list[str] = field(default_factory=list)
    measurements: dict[str, dict[str, Any]] = field(default_factory=dict)
    """variant -> measurement name -> {"value", "evidence", "detail"}"""
    throughput_fps: dict[str, float] = field(default_factory=dict)
    """variant -> frames per second, derived from the mean latency (reconciler.engine.throughput)."""
    ran_on: str = ""
    """Where the spec's chain ran, when not in this process's machine alone ("ray node <id>")."""

    def measured(
        self,
        variant: str,
        inputs: dict[str, list[int]],
        measurements: dict[str, dict[str, Any]],
        compile_batch: int,
    ) -> None:
        """Records a variant's measurements and the throughput derived from them."""
        self.measurements[variant] = measurements
        fps = throughput.variant_fps(measured_view.measurements(measurements), inputs, compile_batch)
        if fps is not None:
            self.throughput_fps[variant] = fps

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SpecResult:
        """The inverse of to_json (which leaves out a stage's None fields): a spec's entry of plan or
        apply `--json`, as the settled cache and watch read it back."""
        fields = {k: v for k, v in data.items() if k not in ("stages", "slo")}
        result = cls(**fields)
        result.stages = [StageResult(**{"key": None, **s}) for s in data["stages"]]
        result.slo = [Judged(**v) for v in data["slo"]]
        return result

    def stall(self, error: str) -> SpecResult:
        """Stopped before any stage on `error` (a spec or lock file that cannot be read): Stalled,
        nothing known of its sync or health."""
        self.errors.append(error)
        self.status, self.sync, self.health = STALLED, UNKNOWN, UNKNOWN
        return self

    @property
    def failed(self) -> bool:
        return bool(self.errors) or any(s.action == "failed" for s in self.stages)

    @property
    def slo_ok(self) -> bool:
        return all(v.passed is True for v in self.slo)

    def to_json(self) -> dict[str, Any]:
        where = {"ran_on": self.ran_on} if self.ran_on else {}
        return {
            **where,
            "name": self.name,
            "file": self.file,
            "target": self.target,
            "status": self.status,
            "sync": self.sync,
            "health": self.health,
            "carried_over": self.carried_over,
            "lock_problems": self.lock_problems,
            "errors": self.errors,
            "stages": [s.to_json() for s in self.stages],
            "slo": [v.to_json() for v in self.slo],
            "measurements": self.measurements,
            **({"throughput_fps": self.throughput_fps} if self.throughput_fps else {}),
        }
