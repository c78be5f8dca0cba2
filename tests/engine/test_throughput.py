"""Throughput (FPS) is batch x 1000 / the mean latency: the rule on its own, and on a real apply, where
status, plan, apply and report print the figure the test computes from evaluate's recorded samples."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from reconciler.engine import throughput
from reconciler.records.measured import measurements as read_measurements

Npuctl = Callable[..., CompletedProcess[str]]


def test_batch_is_the_inputs_common_leading_dimension_else_compile_batch() -> None:
    assert throughput.batch({"image": [1, 1, 8, 8]}, 1) == 1
    assert throughput.batch({"image": [4, 1, 8, 8]}, 1) == 4
    assert throughput.batch({"image": [1, 3, 8, 8]}, 8) == 8
    assert throughput.batch({"a": [2, 3], "b": [4, 3]}, 1) == 1, "no common leading dimension"


def test_fps_is_batch_times_1000_over_the_mean_latency() -> None:
    assert throughput.fps(2.5, 1) == pytest.approx(400.0)
    assert throughput.fps(2.5, 4) == pytest.approx(1600.0)
    assert throughput.fps(None, 1) is None and throughput.fps(0.0, 1) is None
    measured = {"latency_ms.mean": {"value": 0.5}, "latency_ms.p90": {"value": 0.9}}
    assert throughput.variant_fps(read_measurements(measured), {"x": [2, 3]}, 1) == pytest.approx(4000.0)
    assert (
        throughput.variant_fps(read_measurements({"latency_ms.estimate": {"value": 0.5}}), {"x": [1]}) is None
    )


def test_every_command_shows_the_fps_of_the_recorded_samples(digits_repo: Path, npuctl: Npuctl) -> None:
    applied = npuctl(digits_repo, "apply", "--json")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    report = json.loads(npuctl(digits_repo, "report", "digits", "--json").stdout)
    samples = report["latency"]["default"]["samples"]
    expected = 1 * 1000 / statistics.fmean(samples)
    status = json.loads(npuctl(digits_repo, "status", "--json").stdout)["specs"][0]
    plan = json.loads(npuctl(digits_repo, "plan", "--json").stdout)["specs"][0]
    shown = {
        "apply": json.loads(applied.stdout)["specs"][0]["throughput_fps"]["default"],
        "status": status["throughput_fps"]["default"],
        "plan": plan["throughput_fps"]["default"],
        "report": report["throughput_fps"]["default"],
    }
    for command, fps in shown.items():
        assert fps == pytest.approx(expected, rel=1e-4), command
    table = npuctl(digits_repo, "status").stdout
    assert "FPS" in table and f"{shown['status']:.0f}" in table
