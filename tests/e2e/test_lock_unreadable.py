"""A lock file that cannot be read (merge-conflict markers, truncated JSON, an unknown format) is an
error every command names at its file and line, exit 1; it stalls its own spec only, and nothing
rewrites or deletes it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import DIGITS_SPEC, copy_digits, git, run_npuctl

LOCATED = re.compile(r"digits\.lock\.json:(\d+):(\d+): ")


def _conflicted(text: str) -> str:
    """What `git merge` leaves when both sides changed the lock's health line."""
    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if '"health"' in line)
    other = lines[at].replace("Healthy", "Degraded")
    lines[at : at + 1] = ["<<<<<<< HEAD\n", lines[at], "=======\n", other, ">>>>>>> theirs\n"]
    return "".join(lines)


@pytest.fixture(scope="module")
def built_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real specs applied once for the module; each test damages one lock and restores it."""
    repo = tmp_path_factory.mktemp("unreadable") / "repo"
    (repo / "specs").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    copy_digits(repo)
    for name in ("digits", "other"):
        (repo / "specs" / f"{name}.yaml").write_text(DIGITS_SPEC.format(name=name))
    done = run_npuctl(repo, "apply")
    assert done.returncode == 0, done.stdout + done.stderr
    return repo


@pytest.fixture
def built(built_once: Path) -> Iterator[Path]:
    lock = built_once / "specs" / "digits.lock.json"
    good = lock.read_bytes()
    yield built_once
    lock.write_bytes(good)


COMMANDS = [
    ("validate",),
    ("plan",),
    ("status",),
    ("apply",),
    ("apply", "--locked"),
    ("fsck",),
    ("gc",),
    ("artifacts", "digits"),
    ("explain", "digits"),
    ("report", "digits", "-o", "page.html"),
    ("export", "digits", "out"),
    ("push", "--remote", "file://{remote}"),
    ("pull", "--remote", "file://{remote}"),
]


def test_every_command_names_a_conflicted_lock_and_none_rewrites_it(built: Path, tmp_path: Path) -> None:
    lock = built / "specs" / "digits.lock.json"
    broken = _conflicted(lock.read_text())
    lock.write_text(broken)
    marker = broken.splitlines().index("<<<<<<< HEAD") + 1
    for args in COMMANDS:
        done = run_npuctl(built, *(a.format(remote=tmp_path / "remote") for a in args))
        said = done.stdout + done.stderr
        assert done.returncode == 1, (args, said)
        assert LOCATED.search(said) is not None, (args, said)
        assert f"digits.lock.json:{marker}:1: git merge-conflict marker" in said, (args, said)
        assert "internal error" not in said and "never built" not in said, (args, said)
        assert lock.read_text() == broken, args
        if args in [("plan",), ("status",), ("apply",)]:  # the other spec is not held up by it
            assert re.search(r"other\s.*Healthy", said), (args, said)


@pytest.mark.parametrize("why", ["truncated JSON", "format_version: 99"])
def test_a_truncated_or_newer_lock_stalls_its_spec_only(built: Path, why: str) -> None:
    lock = built / "specs" / "digits.lock.json"
    text = lock.read_text()
    broken = (
        text[: len(text) // 2]
        if why == "truncated JSON"
        else text.replace('"format_version": 2', '"format_version": 99')
    )
    lock.write_text(broken)
    for command in ("status", "apply"):
        done = run_npuctl(built, command)
        said = done.stdout + done.stderr
        assert done.returncode == 1 and why in said and LOCATED.search(said), said
        assert re.search(r"other\s.*Healthy", said), said
        assert lock.read_text() == broken
