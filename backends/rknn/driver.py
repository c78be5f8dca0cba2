"""Drives worker.py inside the managed RKNN venv through backends.sdk.worker (one subprocess per build,
its errors translated there: a reported failure such as an API call returning -1, and an abort such as
rk2118's SIGABRT, exit 134, are TerminalErrors carrying the log's last lines).

Builds run with hash randomisation and address-space randomisation off, in a job folder whose path has
the same length on every run, under a fixed environment: the toolkit embeds heap addresses in the
.rknn, and with all of them fixed the same inputs give the same bytes.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from backends.sdk import outside_tmp, toolchains
from backends.sdk.errors import TerminalError, ToolchainMissing
from backends.sdk.worker import run_worker

WORKER = Path(__file__).with_name("worker.py")


def worker_digest() -> str:
    import hashlib

    return hashlib.sha256(WORKER.read_bytes()).hexdigest()[:16]


def venv_python() -> Path:
    py = toolchains.python(toolchains.RKNN)
    if py is None:
        raise ToolchainMissing(
            f"rknn-toolkit2 {toolchains.RKNN.version} not installed: {toolchains.RKNN.install_hint}"
        )
    return py


_KEPT_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS")


def worker_env(job_dir: Path) -> dict[str, str]:
    """A fixed, minimal environment: the toolkit's output depends on the process's memory layout,
    which depends on the environment's size, so the same inputs only give the same bytes when the
    environment is the same (machine-wide CPU workarounds are kept)."""
    env = {k: os.environ[k] for k in _KEPT_ENV if k in os.environ}
    env.setdefault("OMP_NUM_THREADS", "2")
    env.update(
        {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(job_dir),
            "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    return env


@contextmanager
def job_folder() -> Iterator[Path]:
    """A scratch folder whose path has the same length on every run (see worker_env), outside the
    repository; backends.sdk.outside_tmp records it so `npuctl gc` removes it after a kill -9."""
    with outside_tmp.folder("npuctl-rknn-") as path:
        yield path / "job"


_SUGGESTED = re.compile(r"disable_rules=\[([^\]]*)\] in rknn\.config\(\)")
RULE_RETRIES = 3
"""At most this many builds with more of the toolkit's suggested rules disabled."""


def suggested_rules(text: str) -> set[str]:
    """The graph-optimizer rules rknn-toolkit2 names when one of them fails ("You can add
    disable_rules=['fuse_...'] in rknn.config() to temporarily disable the error rule!")."""
    return {name for group in _SUGGESTED.findall(text) for name in re.findall(r"'([\w.-]+)'", group)}


def run(
    request: dict[str, Any],
    job_dir: Path,
    log: Path,
    after: dict[str, Any] | None = None,
    timeout_s: float = 1800.0,
) -> dict[str, Any]:
    """Runs one worker request in `job_dir` (from job_folder()); `after` holds the actions on the built
    model (simulate, analysis). Returns the worker's result (ok: true).

    When the toolkit's own graph optimizer fails in one of its fusion rules it names the rule and says
    it can be disabled; the build is then made again with it disabled (up to RULE_RETRIES times, each
    a fresh process: the same inputs give the same bytes, so evaluate's rebuild takes the same path),
    and the result says which (`disabled_rules`). The compile's check then judges that build."""
    for _ in range(RULE_RETRIES):
        start = log.stat().st_size if log.exists() else 0
        try:
            result = _run_once(request, job_dir, log, after, timeout_s)
        except TerminalError:
            with log.open("rb") as fh:
                fh.seek(start)
                told = suggested_rules(fh.read().decode("utf-8", "replace"))
            have = set(request["config"].get("disable_rules") or [])
            if told <= have:
                raise
            request = {**request, "config": {**request["config"], "disable_rules": sorted(have | told)}}
            with log.open("a") as fh:
                fh.write(
                    f"npuctl: building again with rknn.config(disable_rules={sorted(have | told)}), as the toolkit suggests\n"
                )
            continue
        disabled = request["config"].get("disable_rules")
        return {**result, "disabled_rules": disabled} if disabled else result
    return _run_once(request, job_dir, log, after, timeout_s)


def _run_once(
    request: dict[str, Any], job_dir: Path, log: Path, after: dict[str, Any] | None, timeout_s: float
) -> dict[str, Any]:
    python = venv_python()
    if after:
        job_dir.mkdir(parents=True, exist_ok=True)
        (job_dir.parent / "rknn-after.json").write_text(json.dumps(after, indent=1, sort_keys=True))
    # reproducible: PYTHONHASHSEED=0 (worker_env) must reach the toolkit; the fixed env has no PYTHONPATH
    return run_worker(
        python,
        WORKER,
        request,
        job_dir,
        log,
        tool="rknn-toolkit2",
        timeout_s=timeout_s,
        env=worker_env(job_dir),
        reproducible=True,
    )
