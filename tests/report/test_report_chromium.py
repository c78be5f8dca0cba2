"""The report opened in real headless Chromium: the screenshot must show a rendered page, not a blank one."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from reconciler.report.graph import COLORS
from tests.conftest import run_npuctl

PLOTLY_PLOT_BACKGROUND = "#e5ecf6"
"""The default Plotly template's plot area colour: only drawn when plotly.js actually renders a chart."""
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


def _rgb(hex_color: str) -> tuple[int, int, int]:
    return (int(hex_color[1:3], 16), int(hex_color[3:5], 16), int(hex_color[5:7], 16))


def _near(pixel: tuple[int, ...], color: tuple[int, int, int], tolerance: int = 12) -> bool:
    return all(abs(int(a) - b) <= tolerance for a, b in zip(pixel[:3], color, strict=True))


@pytest.mark.skipif(CHROMIUM is None, reason="chromium missing")
def test_report_screenshot_is_not_blank(report_repo: Path, tmp_path: Path) -> None:
    from PIL import Image, ImageStat

    page = tmp_path / "report.html"
    assert run_npuctl(report_repo, "report", "digits-auto", "-o", str(page)).returncode == 0
    shot = tmp_path / "shot.png"
    assert CHROMIUM is not None
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1280,2000",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.exists(), done.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 2000)
    stddev = ImageStat.Stat(image).stddev
    assert min(stddev) > 10, f"a blank page has no variance: {stddev}"
    colors = image.getcolors(maxcolors=1 << 20) or []
    assert len(colors) > 50, "text, tables and charts give many distinct colours"
    pixels = [c for _, c in colors]
    assert any(_near(p, _rgb(COLORS["CPU"])) for p in pixels), "the CPU colour (nodes, legend) is on the page"
    plot_area = _rgb(PLOTLY_PLOT_BACKGROUND)
    painted = sum(n for n, c in colors if _near(c, plot_area, 2))
    assert painted > 20_000, "plotly.js ran: its chart backgrounds cover a large area"
