"""The compile check's one comparison: per-channel relative errors, judged at their 99th percentile, the
single worst element reported beside it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from backends.passes.accuracy import ModelOutputs
from backends.sdk import artifact_check
from backends.sdk.errors import TerminalError


def _outputs(name: str, arrays: list[np.ndarray]) -> ModelOutputs:
    return ModelOutputs([name], [[a] for a in arrays])


def test_one_element_rounded_across_a_sigmoid_is_reported_not_failed(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    source = [rng.uniform(0, 1, (1, 1, 40, 60)).astype(np.float32) for _ in range(2)]
    artifact = [s + rng.normal(0, 0.004, s.shape).astype(np.float32) for s in source]
    artifact[1][0, 0, 7, 9] = source[1][0, 0, 7, 9] + 0.8
    found = artifact_check.agreement(_outputs("maps", source), _outputs("maps", artifact))
    scale = max(float(source[1][0, 0, 7, :].max()), 1e-12)  # channels: the shorter axis (rows of 60)
    assert found.worst == pytest.approx(0.8 / scale, rel=1e-3)
    assert (found.output, found.channel) == ("maps", 7)
    assert found.bulk < 0.05
    record = artifact_check.require(found, 0.25, "compile", "two samples", tmp_path / "log")
    assert record["agrees"] and record["worst_channel_error"] > 0.25 > record["bulk_channel_error"]


def test_a_score_collapse_fails_naming_both_numbers(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    table = rng.uniform(0, 1, (1, 6, 500)).astype(np.float32)  # [1, 4 boxes + 2 scores, N]
    table[0, :4] *= 320
    collapsed = table.copy()
    collapsed[0, 4:][collapsed[0, 4:] < 0.63] = 0.0  # every score under one uint8 step of 1.26 is gone
    found = artifact_check.agreement(_outputs("head", [table]), _outputs("head", [collapsed]))
    relative = np.abs(collapsed - table)[0, 4:] / table[0, 4:].max(axis=1, keepdims=True)
    assert found.worst == pytest.approx(float(relative.max()), rel=1e-6) and found.channel in (4, 5)
    with pytest.raises(TerminalError, match=r"99% quantile .*tolerance 0.25.*worst: channel [45]"):
        artifact_check.require(found, 0.25, "compile", "one sample", tmp_path / "log")
