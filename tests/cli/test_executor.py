"""`-j N` never starts more workers than the run has specs: the workers start before the first spec
(warm while the run plans), and an idle one would only cost its start-up."""

from __future__ import annotations

from pathlib import Path

from reconciler.cli._executor import make
from reconciler.engine.executors import LocalPool


def test_one_spec_runs_in_process_whatever_j_says(tmp_path: Path) -> None:
    assert make("local", 4, None, tmp_path, 1) is None


def test_the_pool_s_workers_start_before_the_first_spec(tmp_path: Path) -> None:
    pool = make("local", 2, None, tmp_path, 2)
    try:
        assert isinstance(pool, LocalPool)
        assert all(worker.proc is not None and worker.proc.poll() is None for worker in pool._workers)
    finally:
        assert pool is not None
        pool.close()
    assert all(worker.proc is None for worker in pool._workers)
