"""The safe, bounded YAML reader: positions, limits, refusal of anything but plain values."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.spec._errors import SpecErrors
from reconciler.spec._yaml import MAX_BYTES, Map, flatten, parse, read

F = Path("/repo/specs/x.yaml")


def errors(text: str) -> list[str]:
    with pytest.raises(SpecErrors) as caught:
        parse(text, F)
    return [f"{e.line}:{e.column}: {e.field}: {e.message}" for e in caught.value.errors]


def test_positions_of_values_and_keys_are_one_based() -> None:
    flat = flatten(parse("a:\n  b: [1, 2]\n  c: {d: x}\n", F))
    assert flat.data == {"a": {"b": [1, 2], "c": {"d": "x"}}}
    assert (flat.keys[("a", "b")].line, flat.keys[("a", "b")].column) == (2, 3)
    assert (flat.nodes[("a", "b", 1)].mark.line, flat.nodes[("a", "b", 1)].mark.column) == (2, 10)
    assert (flat.nodes[("a", "c", "d")].mark.line, flat.nodes[("a", "c", "d")].mark.column) == (3, 10)


def test_yaml_11_scalars_and_dates() -> None:
    data = flatten(parse("a: 0x10\nb: 1_000\nc: ~\nd: 2024-05-01\ne: '1.10'\nf: true\n", F)).data
    assert data == {"a": 16, "b": 1000, "c": None, "d": "2024-05-01", "e": "1.10", "f": True}


def test_merge_keys_explicit_keys_win() -> None:
    data = flatten(parse("base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  y: 3\n", F)).data
    assert data["m"] == {"y": 3, "x": 1}


def test_every_duplicate_key_is_reported_with_both_positions() -> None:
    found = errors("a: 1\nb: {c: 1, c: 2}\na: 3\n")
    assert found == [
        "2:11: b.c: duplicate key 'c' (first at line 2, column 5)",
        "3:1: a: duplicate key 'a' (first at line 1, column 1)",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1: a\n", "1:1: : keys must be strings: quote '1' (YAML reads it as the integer 1)"),
        ("? [a]\n: 1\n", "1:3: : mapping keys must be strings, not collections"),
        ("a: !!python/name:os.system x\n", "1:4: a: tag !!python/name:os.system is not allowed"),
        ("a: !custom x\n", "1:4: a: tag !custom is not allowed"),
        ("a: !!binary aGVsbG8=\n", "1:4: a: tag !!binary is not allowed"),
        ("a: !!set {x}\n", "1:4: a: tag !!set is not allowed"),
        ("a: &x [*x]\n", "1:8: a.0: recursive alias *x"),
        ("a: *nothing\n", "1:4: a: unknown alias *nothing"),
        ("a: 1\n---\nb: 2\n", "2:1: : only one YAML document per file is allowed"),
        ("[" * 40 + "]" * 40, "nesting deeper than 32 levels"),
        ("a: [1\n", "2:1: : invalid YAML: did not find expected ',' or ']'"),
        ("a:\tb: c\n", "invalid YAML"),
    ],
)
def test_refused(text: str, expected: str) -> None:
    found = errors(text)
    assert any(expected in line for line in found), found


def test_billion_laughs_is_refused_without_expansion() -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 10) + "]")
    found = errors("\n".join(lines) + "\n")
    # 10**9 values if expanded; refused at the first value that expands past the limit (e, 111111)
    assert found == ["5:4: e: value expands to 111111 values through aliases, more than 20000 (alias bomb?)"]


@pytest.mark.timeout(10)
def test_wide_alias_fanout_is_bounded() -> None:
    """Memoised sizes: 30 levels of doubling (2**30 values) is measured in linear time."""
    lines = ["a0: &a0 [x, x]"] + [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]" for i in range(1, 30)]
    found = errors("\n".join(lines) + "\n")
    assert "alias bomb" in found[0]


def test_expansion_depth_is_bounded() -> None:
    text = "a: &a [1]\n" + "".join(f"b{i}: &b{i} [*{'a' if i == 0 else f'b{i - 1}'}]\n" for i in range(40))
    assert any("nesting deeper than 32 levels after alias expansion" in line for line in errors(text))


def test_file_limits(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("a: " + "x" * (MAX_BYTES + 1) + "\n")
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n")
    for path, message in ((big, "limited to"), (empty, "empty document")):
        with pytest.raises(SpecErrors) as caught:
            read(path)
        assert message in str(caught.value)
        assert caught.value.errors[0].line == 0  # whole-file problems have no position
        assert str(caught.value.errors[0]).endswith(caught.value.errors[0].message)


def test_non_utf8_is_located(tmp_path: Path) -> None:
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"a: 1\nbb: \xff\xfe\n")
    with pytest.raises(SpecErrors) as caught:
        read(binary)
    error = caught.value.errors[0]
    assert (error.line, error.column) == (2, 5)  # the first bad byte, 1-based
    assert "not UTF-8" in error.message and "0xff" in error.message


def test_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes("\ufeffa: 1\n".encode())
    assert isinstance(read(path), Map)
