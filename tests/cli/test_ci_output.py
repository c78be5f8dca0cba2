"""CI-mode output: a heartbeat per stage that did work, a closing summary, GitHub Actions annotations."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from reconciler.cli._ci import annotation
from tests.conftest import run_npuctl


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_a_heartbeat_per_stage_that_did_work_and_a_closing_summary(digits_repo: Path) -> None:
    first = run_npuctl(digits_repo, "apply")
    assert first.returncode == 0, first.stdout + first.stderr
    beats = [line for line in first.stderr.splitlines() if line.startswith("npuctl: digits [default] ")]
    assert [b.split()[3] for b in beats] == [
        "import",
        "check",
        "rewrite",
        "preprocess",
        "quantize",
        "compile",
        "evaluate",
    ]
    assert re.match(
        r"npuctl: digits \[default\] compile built in \d+\.\d s \(6/\d+ stages, \d+\.\d s\)$", beats[5]
    ), beats
    again = run_npuctl(digits_repo, "apply", "--json")
    [spec] = json.loads(again.stdout)["specs"]
    idle = sum(1 for stage in spec["stages"] if stage.get("identity"))
    assert 0 < idle < 7, "the digits spec has inactive stages: they pass their input through"
    verdicts = Counter(v["verdict"] for v in spec["slo"])
    slos = ", ".join(f"{n} {word}" for word, n in sorted(verdicts.items()))
    last = first.stdout.strip().splitlines()[-1]
    expected = f"apply: 1 spec(s) (1 Healthy); stages: {7 - idle} built, {idle} identity; SLOs: {slos}; "
    assert last.startswith(expected) and re.search(r"; \d+\.\d s; exit 0$", last), last

    assert not [line for line in again.stderr.splitlines() if line.startswith("npuctl: digits")], (
        "a no-op is quiet"
    )
    assert again.stderr.strip().splitlines()[-1].startswith("apply: 1 spec(s)"), (
        "with --json the summary is on stderr"
    )
    assert again.stdout.lstrip().startswith("{"), "stdout stays machine-clean"


def test_github_annotations_point_at_the_spec_lines(digits_repo: Path) -> None:
    spec = digits_repo / "specs" / "digits.yaml"
    spec.write_text(spec.read_text().replace("min: 0.5", "min: 0.9999"))
    bad = digits_repo / "specs" / "bad.yaml"
    bad.write_text(spec.read_text().replace("name: digits", "name: bad").replace("runs: 5", "runs: -1"))
    done = run_npuctl(digits_repo, "apply", env={"GITHUB_ACTIONS": "true"})
    assert done.returncode == 1
    annotations = [line for line in done.stderr.splitlines() if line.startswith("::")]
    runs_line = _line_of(bad, "runs: -1")
    assert any(
        a.startswith(f"::error file=specs/bad.yaml,line={runs_line},col=") and "::spec.evaluate.runs:" in a
        for a in annotations
    ), annotations
    slo_line = _line_of(spec, "min: 0.9999")
    failed = [a for a in annotations if "accuracy.min [default] failed" in a]
    assert len(failed) == 1 and failed[0].startswith(f"::error file=specs/digits.yaml,line={slo_line},"), (
        annotations
    )

    plain = run_npuctl(digits_repo, "apply")
    assert not [line for line in plain.stderr.splitlines() if line.startswith("::")], (
        "only under GitHub Actions"
    )


def test_annotation_values_are_escaped_as_the_runner_expects() -> None:
    line = annotation("warning", "50% worse\nsee log", "specs/a,b:c.yaml", 3, 7, "npuctl: x")
    assert line == "::warning file=specs/a%2Cb%3Ac.yaml,line=3,col=7,title=npuctl%3A x::50%25 worse%0Asee log"
    assert annotation("error", "plain") == "::error::plain"
