"""Test modules are imported by their file name (tests/ folders are not packages), so two test files of
one name break whichever pytest worker imports both ("import file mismatch")."""

from __future__ import annotations

from collections import Counter
from pathlib import Path


def test_no_two_test_files_share_a_name() -> None:
    names = Counter(p.name for p in Path(__file__).parent.rglob("test_*.py"))
    assert [n for n, count in names.items() if count > 1] == []
