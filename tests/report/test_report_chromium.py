"""The report opened in real headless Chromium: every chart drawn, zero console messages, a page that is
visibly rendered (not blank), under 1 MB."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from reconciler.report.graph import COLORS
from tests.conftest import run_npuctl

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--log-level=0",
    "--virtual-time-budget=5000",
]


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert Path(CHROMIUM).exists(), "chromium is installed by .ci/setup"
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=120
    )


def _rgb(hex_color: str) -> tuple[int, int, int]:
    return (int(hex_color[1:3], 16), int(hex_color[3:5], 16), int(hex_color[5:7], 16))


def _near(pixel: tuple[int, ...], color: tuple[int, int, int], tolerance: int = 12) -> bool:
    return all(abs(int(a) - b) <= tolerance for a, b in zip(pixel[:3], color, strict=True))


def test_every_chart_draws_with_zero_console_messages(report_repo: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    assert run_npuctl(report_repo, "report", "digits-auto", "-o", str(page)).returncode == 0
    assert page.stat().st_size < 1_000_000
    done = _chromium(tmp_path, "--dump-dom", page.as_uri())
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console
    canvases = re.findall(r"<canvas[^>]*>", done.stdout)
    assert len(canvases) >= 4, done.stdout[-2000:]  # latency, two sensitivity charts, history
    assert all('data-drawn="yes"' in c for c in canvases), canvases
    assert 'chart-error">' not in done.stdout


def test_report_screenshot_is_not_blank(report_repo: Path, tmp_path: Path) -> None:
    from PIL import Image, ImageStat

    page = tmp_path / "report.html"
    assert run_npuctl(report_repo, "report", "digits-auto", "-o", str(page)).returncode == 0
    shot = tmp_path / "shot.png"
    done = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,2400", page.as_uri())
    assert shot.exists(), done.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 2400)
    stddev = ImageStat.Stat(image).stddev
    assert min(stddev) > 10, f"a blank page has no variance: {stddev}"
    colors = image.getcolors(maxcolors=1 << 20) or []
    assert len(colors) > 50, "text, tables and charts give many distinct colours"
    pixels = [c for _, c in colors]
    assert any(_near(p, _rgb(COLORS["CPU"])) for p in pixels), "the CPU colour (boxes, legend) is on the page"
    bars = sum(n for n, c in colors if _near(c, (0x1F, 0x77, 0xB4), 40))
    assert bars > 2_000, "Chart.js drew the blue bars and lines"
