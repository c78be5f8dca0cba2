"""Third-party warnings stay out of npuctl's output (reconciler.cli._quiet)."""

from __future__ import annotations

import os
import subprocess
import sys

PROGRAM = """
import sys
from reconciler.cli import cli, main

@cli.command("sftp-like")
def _sftp_like() -> None:
    import asyncssh  # what an sftp:// remote imports; it warns about DSA on import

sys.argv = ["npuctl", "sftp-like"]
main()
"""


def _stderr(program: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("NPUCTL_DEBUG", "PYTHONWARNINGS")}
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_library_deprecation_warning_is_not_printed_by_a_command() -> None:
    assert "DSA" in _stderr("import asyncssh"), "asyncssh warns when imported outside npuctl"
    assert _stderr(PROGRAM) == ""


def test_library_loggers_are_raised_to_error() -> None:
    import logging

    from reconciler.cli._quiet import LIBRARIES, quiet_third_party

    before = {name: logging.getLogger(name).level for name in LIBRARIES}
    try:
        os.environ.pop("NPUCTL_DEBUG", None)
        quiet_third_party()
        assert all(logging.getLogger(name).level == logging.ERROR for name in LIBRARIES)
    finally:
        for name, level in before.items():
            logging.getLogger(name).setLevel(level)
