"""npuctl-trust.yaml: names and keys, and one located error for anything else."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from reconciler.trust import policy
from reconciler.trust.keys import SigningKey

KEY = SigningKey(Ed25519PrivateKey.from_private_bytes(bytes(range(32))), "test").public.text
"""A fixed key: test ids name it, and every xdist worker must collect the same ids."""


def test_names_each_key() -> None:
    parsed = policy.parse(f"trusted-keys:\n  - name: ci\n    key: {KEY}\n", "p.yaml")
    assert parsed.names == {KEY: "ci"} and parsed.name_of(KEY) == "ci"
    assert policy.parse("", "p.yaml").names == {}
    assert policy.parse("trusted-keys:\n", "p.yaml").names == {}


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (f"trusted-key:\n  - name: ci\n    key: {KEY}\n", "p.yaml:1:1: trusted-key: unknown field"),
        (
            "trusted-keys:\n  - name: ci\n    key: ed25519:AAAA\n",
            "p.yaml:2:5: trusted-keys[0].key: an ed25519",
        ),
        ("trusted-keys:\n  - name: ci\n", "p.yaml:2:5: trusted-keys[0].key: missing"),
        (f"trusted-keys:\n  - name: ci\n    key: {KEY}\n    email: x\n", "p.yaml:4:5: trusted-keys[0].email"),
        (f"trusted-keys:\n  - {{name: a, key: {KEY}}}\n  - {{name: b, key: {KEY}}}\n", "listed twice"),
        ("trusted-keys: [\n", "p.yaml:2:1: invalid YAML"),
        ("trusted-keys:\n  - name: !!python/object:os.system x\n", "trusted-keys[0].name: expected a string"),
    ],
)
def test_a_malformed_policy_is_one_located_error(text: str, where: str) -> None:
    with pytest.raises(policy.PolicyError) as caught:
        policy.parse(text, "p.yaml")
    assert where in str(caught.value)


def test_an_absent_file_trusts_no_key_and_an_oversized_one_is_refused(tmp_path: Path) -> None:
    assert policy.read(tmp_path).names == {}
    (tmp_path / policy.FILE).write_text("# " + "x" * policy.MAX_BYTES + "\n")
    with pytest.raises(policy.PolicyError, match="exceeds"):
        policy.read(tmp_path)
