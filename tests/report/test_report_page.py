"""`npuctl report` on real applies: a self-contained page with every section, and graceful gaps."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from tests.conftest import git, run_npuctl


def _report(repo: Path, spec: str, out: Path) -> str:
    done = run_npuctl(repo, "report", spec, "-o", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == str(out)
    return out.read_text()


def test_the_page_is_self_contained_with_every_section(report_repo: Path, tmp_path: Path) -> None:
    html = _report(report_repo, "digits-auto", tmp_path / "auto.html")
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=\"?https?:", html), "no external resources"
    assert "Chart.js v4" in html, "Chart.js is inlined"
    assert len(html.encode()) < 1_000_000, f"the page is {len(html.encode())} bytes"
    for canvas in ('id="latency-0"', 'id="sensitivity-0"', 'id="sensitivity-1"', 'id="history-0"', "<svg"):
        assert canvas in html, canvas
    assert "digits-auto → cpu" in html and "quantization <code>ptq</code>" in html
    assert "/conv1/Conv" in html and "classification top1" in html  # the search measured the SLO's metric
    assert html.count("digits v1") == 1 and "digits v2" in html, "history rows name their commits"
    assert "latency_ms.p90" in html and "measured:host" in html


def test_a_spec_path_works_and_float_specs_say_why_there_is_no_sensitivity(
    report_repo: Path, tmp_path: Path
) -> None:
    html = _report(report_repo, "specs/digits.yaml", tmp_path / "float.html")
    assert 'id="sensitivity-0"' not in html
    assert "quantization.mode is none: nothing was quantized" in html


def test_default_output_is_under_the_state_folder(report_repo: Path) -> None:
    done = run_npuctl(report_repo, "report", "digits")
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == report_repo / ".npuctl" / "reports" / "digits.html"


def test_a_clone_without_local_state_still_reports_slos_and_history(
    report_repo: Path, tmp_path: Path
) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(report_repo), str(clone))
    done = run_npuctl(clone, "report", "digits", "-o", str(tmp_path / "clone.html"))
    assert done.returncode == 0, done.stderr
    assert "the build's files are not on this machine (applied elsewhere): `npuctl pull` them" in done.stderr
    html = (tmp_path / "clone.html").read_text()
    assert 'id="history-0"' in html and "<svg" not in html
    assert "No placement recorded" in html and "No raw latency samples" in html


def _sections(repo: Path, spec: str) -> dict[str, object]:
    done = run_npuctl(repo, "report", spec, "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    return {k: data[k] for k in ("placement", "latency", "profile", "notes")}


def test_a_fresh_clone_after_pull_reports_placement_latency_and_profile(
    report_repo: Path, tmp_path: Path
) -> None:
    """The developer pushes the build to the remote cache; a fresh clone (CI) pulls it and its report
    is the developer's: the same placement, latency samples and profile."""
    remote = (tmp_path / "remote").as_uri()
    done = run_npuctl(report_repo, "push", "--remote", remote)
    assert done.returncode == 0, done.stdout + done.stderr
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(report_repo), str(clone))
    done = run_npuctl(clone, "pull", "--remote", remote)
    assert done.returncode == 0 and " 0 not on the remote" in done.stdout, done.stdout + done.stderr
    developer, fresh = _sections(report_repo, "digits"), _sections(clone, "digits")
    assert fresh["placement"] and fresh["latency"] and fresh["profile"], fresh["notes"]
    assert fresh == developer
    html = _report(clone, "digits", tmp_path / "pulled.html")
    assert "<svg" in html and 'id="latency-0"' in html and 'id="profile-0"' in html


def test_a_store_without_its_records_still_reports_from_the_lock(report_repo: Path, tmp_path: Path) -> None:
    """state.db lost, the store kept: the lock's records name the artifacts by digest, so placement and
    profile still come from the store (the raw latency samples lived in the lost record)."""
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(report_repo), str(clone))
    shutil.copytree(report_repo / ".npuctl" / "store", clone / ".npuctl" / "store")
    fresh = _sections(clone, "digits")
    developer = _sections(report_repo, "digits")
    assert fresh["placement"] == developer["placement"] and fresh["profile"] == developer["profile"]
    assert fresh["latency"] == {} and fresh["notes"] == []


def test_unknown_and_unapplied_specs_exit_1(report_repo: Path, tmp_path: Path) -> None:
    done = run_npuctl(report_repo, "report", "nope")
    assert done.returncode == 1 and "npuctl report: nope: no such file or folder, and no spec" in done.stderr
    fresh = report_repo / "specs" / "fresh.yaml"
    fresh.write_text(
        (report_repo / "specs" / "digits.yaml").read_text().replace("name: digits", "name: fresh")
    )
    try:
        done = run_npuctl(report_repo, "report", "fresh")
        assert done.returncode == 1 and "run `npuctl apply` first" in done.stderr
    finally:
        fresh.unlink()


def test_every_chart_is_fed_with_data_points(report_repo: Path, monkeypatch: object) -> None:
    """The sensitivity chart once read keys the quantize stage never wrote and was always empty."""
    import pytest

    from reconciler.report.charts import points
    from reconciler.report.data import gather
    from reconciler.report.render import chart_configs
    from reconciler.spec import load

    mp = pytest.MonkeyPatch()
    mp.chdir(report_repo)
    try:
        data = gather(report_repo, load(report_repo / "specs" / "digits-auto.yaml", report_repo))
    finally:
        mp.undo()
    configs = chart_configs(data)
    assert {k: len(v) > 0 for k, v in configs.items()} == {
        "latency": True,
        "history": True,
        "sensitivity": True,
        "profile": True,
    }
    for section, charts in configs.items():
        for chart in charts:
            assert points(chart) > 0, (section, chart["options"]["plugins"]["title"])
    table = data.quantize["auto"]["table"]  # type: ignore[index]
    metric_bars = configs["sensitivity"][0]["data"]["datasets"][0]["data"]
    assert metric_bars == [float(row["kept_accuracy"] or 0.0) for row in table[:40]]
    assert any(v != 0 for v in configs["sensitivity"][1]["data"]["datasets"][0]["data"]), (
        "SQNR bars are not all 0"
    )
    runs = sum(
        p["y"] for d in configs["latency"][0]["data"]["datasets"] if d["type"] == "bar" for p in d["data"]
    )
    assert runs == sum(len(v["samples"]) for v in data.latency.values())


def test_the_profile_chart_draws_the_slowest_layers_and_the_page_holds_the_suggestions(
    report_repo: Path, tmp_path: Path
) -> None:
    import pytest

    from reconciler.report.data import gather
    from reconciler.report.render import chart_configs, html
    from reconciler.spec import load

    mp = pytest.MonkeyPatch()
    mp.chdir(report_repo)
    try:
        data = gather(report_repo, load(report_repo / "specs" / "digits.yaml", report_repo))
    finally:
        mp.undo()
    assert data.profile is not None
    (chart,) = chart_configs(data)["profile"]
    expected = sorted((float(x["time_ms"]) for x in data.profile["layers"]), reverse=True)[:40]
    assert chart["data"]["datasets"][0]["data"] == expected
    page = html(data)
    assert "Per-layer profile" in page and "Suggestions" in page and "utilisation (estimated" in page
    assert "ran as separate iterations" in page and "separate iterations" in data.profile["how"]


def test_report_json_holds_the_profile_its_attribution_and_suggestions(report_repo: Path) -> None:
    """`npuctl report --json`: the page's data, the profile whole (layers, attribution, suggestions)
    as evaluate recorded it, instead of the page."""
    import json

    import pytest

    done = run_npuctl(report_repo, "report", "digits", "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    profile = payload["profile"]
    total = sum(float(layer["time_ms"]) for layer in profile["layers"])
    assert profile["attribution"]["layers_sum_ms"] == pytest.approx(total, abs=1e-5)
    assert isinstance(profile["suggestions"], list) and "separate iterations" in profile["how"]
    assert payload["spec"] == "digits" and payload["verdicts"] and payload["placement"]["report"]["nodes"]


def test_an_int8_build_slower_than_float_is_a_note_of_its_report(report_repo: Path) -> None:
    """The ptq spec's evaluate timed its float model too, in alternation with the build; the page says
    so exactly when the build's mean there is above it (a float spec has no float timing to compare)."""
    from backends.sdk.vocab import FLOAT_MEAN, PAIRED_MEAN

    lock = json.loads((report_repo / "specs" / "digits-auto.lock.json").read_text())
    found = lock["variants"]["default"]["measurements"]
    assert found[FLOAT_MEAN]["evidence"] == "measured:host"
    slower = found[PAIRED_MEAN]["value"] > found[FLOAT_MEAN]["value"]
    notes = _sections(report_repo, "digits-auto")["notes"]
    assert isinstance(notes, list)
    said = [n for n in notes if "slower than the float model" in n]
    assert len(said) == int(slower), notes
    float_lock = json.loads((report_repo / "specs" / "digits.lock.json").read_text())
    assert FLOAT_MEAN not in float_lock["variants"]["default"]["measurements"]
    assert PAIRED_MEAN not in float_lock["variants"]["default"]["measurements"]
