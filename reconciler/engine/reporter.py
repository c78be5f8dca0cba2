"""Progress hooks (resolvelib's Reporter): the engine calls them, the CLI decides what a user sees."""

from __future__ import annotations

from reconciler.engine.results import SpecResult, StageResult


class Reporter:
    """Does nothing; subclass and override what you want to show."""

    def spec_started(self, spec: str, total_stages: int) -> None:
        pass

    def stage_started(self, spec: str, variant: str, stage: str) -> None:
        pass

    def stage_finished(self, spec: str, result: StageResult) -> None:
        pass

    def spec_finished(self, result: SpecResult) -> None:
        pass

    def waiting(self, what: str, holder: str) -> None:
        pass

    def warning(self, message: str) -> None:
        """Something went wrong that does not fail the run (the remote cache went away)."""
