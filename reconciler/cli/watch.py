"""npuctl watch: re-plan and apply what changed while someone edits; runs until interrupted.

Exit 130 after Ctrl-C and 0 after SIGTERM, in both cases once running applies are cancelled and the
observer is stopped (a killed apply leaves consistent state: the engine is crash-safe).
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType

import click

from reconciler.cli import _common


@click.command(help="Watch specs, models and data; re-plan and apply what changed, cancelling stale builds.")
@_common.paths_argument
@click.option(
    "--debounce",
    "debounce_ms",
    type=click.IntRange(0, 60_000),
    default=300,
    show_default=True,
    help="Quiet window in ms: a burst of saves is handled once.",
)
@click.option(
    "--jobs", "-j", type=click.IntRange(1, 64), default=1, show_default=True, help="Specs applied at once."
)
@click.option(
    "--retry-base",
    "retry_base_s",
    type=click.FloatRange(0.0),
    default=2.0,
    show_default=True,
    help="First backoff delay (s) after a transient failure; doubles up to 60 s.",
)
@click.option(
    "--no-initial", is_flag=True, help="Do not reconcile every spec at start; only react to changes."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per status change (for scripts).")
def command(
    paths: tuple[Path, ...], debounce_ms: int, jobs: int, retry_base_s: float, no_initial: bool, as_json: bool
) -> int:
    from reconciler.repo import find_root
    from reconciler.watch import Watcher, WatchOptions
    from reconciler.watch.status import Board, JsonBoard, LiveBoard, PlainBoard

    root = find_root(Path.cwd())
    board: Board = JsonBoard() if as_json else LiveBoard() if _common.interactive() else PlainBoard()
    options = WatchOptions(
        debounce_s=debounce_ms / 1000, jobs=jobs, retry_base_s=retry_base_s, initial=not no_initial
    )
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        board.message(
            f"watching {', '.join(str(p) for p in paths) or 'specs/'} (Ctrl-C to stop)", event="start"
        )
        Watcher(root, list(paths), board=board, options=options).run(stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 130 if received and received[0] == signal.SIGINT else 0
