"""This machine's signing key: made once, never replaced, read from a CI secret when one is given."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from reconciler.trust import keys


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv(keys.ENV_KEY, raising=False)
    monkeypatch.delenv(keys.ENV_KEY_FILE, raising=False)
    return tmp_path / "config" / "npuctl" / keys.KEY_FILE


def test_the_key_is_made_on_first_need_for_its_owner_only_and_kept(config: Path) -> None:
    assert keys.machine_key(create=False) is None
    made = keys.machine_key()
    assert made is not None and config.is_file()
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    again = keys.machine_key()
    assert again is not None and again.public == made.public
    assert keys.generate(config).public == made.public, "an existing key is never replaced"


def test_a_secret_in_the_environment_is_the_key(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = keys.generate(config.parent / "elsewhere.pem")
    monkeypatch.setenv(keys.ENV_KEY, keys.pem(made).decode())
    key = keys.machine_key()
    assert key is not None and key.public == made.public and key.source == f"${keys.ENV_KEY}"
    assert not config.exists(), "nothing is made when the environment holds the key"
    monkeypatch.setenv(keys.ENV_KEY, "not a key")
    with pytest.raises(keys.KeyProblem, match=keys.ENV_KEY):
        keys.machine_key()


def test_a_signature_verifies_only_for_its_bytes_and_key(config: Path) -> None:
    key = keys.machine_key()
    assert key is not None
    sig = key.sign(b"record")
    assert key.public.verifies(sig, b"record")
    assert not key.public.verifies(sig, b"recorD")
    other = keys.generate(config.parent / "other.pem")
    assert not other.public.verifies(sig, b"record")
    assert keys.PublicKey.parse(key.public.text) == key.public
    for bad in ("ssh-ed25519 AAAA", "ed25519:not base64!", "ed25519:AAAA"):
        with pytest.raises(keys.KeyProblem):
            keys.PublicKey.parse(bad)
