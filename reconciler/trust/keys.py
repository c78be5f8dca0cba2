"""This machine's signing key: an ed25519 key kept outside the repository, made on first need.

Where it is read from, first found wins:
- `NPUCTL_SIGNING_KEY`: the private key itself (PEM), for a CI secret;
- `NPUCTL_SIGNING_KEY_FILE`: a path to it;
- `$XDG_CONFIG_HOME/npuctl/signing-key.pem` (`~/.config/npuctl/...`), made the first time a record is
  signed or `npuctl key generate` runs, readable by its owner only.

A public key is written `ed25519:<base64 of its 32 bytes>`: that text is what a record names as its
signer and what the trust policy lists, so one string identifies a key everywhere.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ENV_KEY = "NPUCTL_SIGNING_KEY"
ENV_KEY_FILE = "NPUCTL_SIGNING_KEY_FILE"
PREFIX = "ed25519:"
KEY_FILE = "signing-key.pem"
MAX_KEY_BYTES = 16 << 10


class KeyProblem(ValueError):
    """A key that cannot be read or parsed; the message names where it came from."""


@dataclass(frozen=True)
class PublicKey:
    text: str
    """`ed25519:<base64>`, as records and the policy write it."""

    @classmethod
    def parse(cls, text: str) -> PublicKey:
        """Raises KeyProblem for anything but `ed25519:` and 32 bytes of base64."""
        if not isinstance(text, str) or not text.startswith(PREFIX):
            raise KeyProblem(f"not an {PREFIX}<base64> public key")
        try:
            raw = base64.b64decode(text[len(PREFIX) :], validate=True)
        except (binascii.Error, ValueError):
            raise KeyProblem("the public key is not base64") from None
        if len(raw) != 32:
            raise KeyProblem(f"an ed25519 public key has 32 bytes, this one {len(raw)}")
        return cls(PREFIX + base64.b64encode(raw).decode())

    def verifies(self, signature: str, data: bytes) -> bool:
        try:
            raw = base64.b64decode(self.text[len(PREFIX) :], validate=True)
            sig = base64.b64decode(signature, validate=True)
            Ed25519PublicKey.from_public_bytes(raw).verify(sig, data)
        except (InvalidSignature, binascii.Error, ValueError, TypeError):
            return False
        return True


@dataclass(frozen=True)
class SigningKey:
    private: Ed25519PrivateKey
    source: str
    """Where it was read from (an environment variable or a file), for messages."""

    @property
    def public(self) -> PublicKey:
        raw = self.private.public_key().public_bytes_raw()
        return PublicKey(PREFIX + base64.b64encode(raw).decode())

    def sign(self, data: bytes) -> str:
        return base64.b64encode(self.private.sign(data)).decode()


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "npuctl"


def key_path() -> Path:
    """Where this machine's key file is (or would be made): NPUCTL_SIGNING_KEY_FILE or the config dir."""
    named = os.environ.get(ENV_KEY_FILE)
    return Path(named).expanduser() if named else config_dir() / KEY_FILE


def _parse_private(pem: bytes, source: str) -> SigningKey:
    from cryptography.hazmat.primitives import serialization  # keys' file formats: only to sign

    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyProblem(f"{source}: not a PEM private key without a passphrase ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyProblem(f"{source}: not an ed25519 key")
    return SigningKey(key, source)


def pem(key: SigningKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def generate(path: Path) -> SigningKey:
    """A new key written to `path` (mode 0600); when another process made one there first, that one.
    Never overwrites an existing key (a lost key would orphan every record it signed)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = SigningKey(Ed25519PrivateKey.generate(), str(path))
    fd, tmp = tempfile.mkstemp(prefix=".signing-key.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:  # mkstemp makes the file 0600
            fh.write(pem(key))
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)  # atomic and exclusive: two first runs at once keep one key
    finally:
        os.unlink(tmp)
    return read_file(path)


def read_file(path: Path) -> SigningKey:
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_KEY_BYTES + 1)
    except OSError as exc:
        raise KeyProblem(f"{path}: cannot read the signing key: {exc.strerror or exc}") from None
    return _parse_private(data[:MAX_KEY_BYTES], str(path))


def machine_key(create: bool = True) -> SigningKey | None:
    """This machine's key; made at `key_path()` when there is none and `create`, else None."""
    secret = os.environ.get(ENV_KEY)
    if secret:
        return _parse_private(secret.encode(), f"${ENV_KEY}")
    path = key_path()
    if path.exists():
        return read_file(path)
    return generate(path) if create else None
