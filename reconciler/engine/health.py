"""Sync apart from health (Argo CD's model), and the one status word every command derives from them.

- sync: are the artifacts those the spec asks for? Synced / OutOfSync / Unknown (invalid spec,
  tampered lock).
- health: are the SLOs met? Healthy (every SLO passed) / Degraded (an SLO failed, measured or on an
  estimate) / Progressing (an apply holds the spec right now: an operation in flight, as in Argo CD) /
  Unknown (an SLO is unverified or met only on an estimate, or its measurements are still to be taken:
  nothing failed, nothing proved).
- status, one word for tables and badges: Stalled (invalid spec or a terminal failure, not retried
  until its inputs change), Failed (a transient failure), OutOfSync, else the health. "Healthy" is the
  only word that reads as good, and it never stands beside a failed or unverified SLO.
"""

from __future__ import annotations

from collections.abc import Iterable

from backends.sdk.vocab import Tone, Verdict
from reconciler.records.judged import Judged

SYNCED, OUT_OF_SYNC, UNKNOWN = "Synced", "OutOfSync", "Unknown"
HEALTHY, DEGRADED, PROGRESSING = "Healthy", "Degraded", "Progressing"
STALLED, FAILED = "Stalled", "Failed"

SYNC_STATES = (SYNCED, OUT_OF_SYNC, UNKNOWN)
HEALTH_STATES = (HEALTHY, DEGRADED, PROGRESSING, UNKNOWN)
STATUSES = (STALLED, FAILED, OUT_OF_SYNC, HEALTHY, DEGRADED, PROGRESSING, UNKNOWN)
TONE = {
    HEALTHY: Tone.GOOD,
    SYNCED: Tone.GOOD,
    DEGRADED: Tone.BAD,
    STALLED: Tone.BAD,
    FAILED: Tone.BAD,
    UNKNOWN: Tone.UNSURE,
    PROGRESSING: Tone.UNSURE,
    OUT_OF_SYNC: Tone.UNSURE,
}
"""How each word reads: only Healthy and Synced are good; a failed SLO or build is bad; the rest is unsure."""


def _failed(verdict: Judged) -> bool:
    judged = Verdict.of(verdict.verdict)
    return verdict.passed is False or (judged is not None and judged.failed)


def of_verdicts(verdicts: Iterable[Judged]) -> str:
    """Health of a set of verdicts."""
    listed = list(verdicts)
    if any(_failed(v) for v in listed):
        return DEGRADED
    if all(v.passed is True for v in listed):
        return HEALTHY
    return UNKNOWN


def status(sync: str, health: str, stalled: bool = False, failed: bool = False) -> str:
    if stalled:
        return STALLED
    if failed:
        return FAILED
    if sync == OUT_OF_SYNC:
        return OUT_OF_SYNC
    return health
