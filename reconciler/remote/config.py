"""Which remote cache a repository uses: `.npuctl.yaml` at its root, `NPUCTL_REMOTE`, or `--remote`.

The file is committed, so it arrives in pull requests: it is read with the bounded safe YAML reader and
may name a URL and non-secret fsspec options only. Anything that looks like a credential (a password in
the URL, a key, secret, token or key file among the options) is an error naming file, line and column
(a `token` that names a method, `anon` for an emulator or public bucket, is not a credential):
credentials come from the environment or the fsspec configuration of the machine, never from the
repository. The CLI option beats the environment, which beats the file; `none` turns the remote off.

    remote:
      url: s3://team-npu-cache/npuctl     # file://, sftp:// or ssh://, s3://, gs://, http(s):// (read-only)
      options: {endpoint_url: http://minio.internal:9000}
      push: true                          # false: only read from it
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from reconciler.spec import _yaml

CONFIG_FILE = ".npuctl.yaml"
ENV_URL = "NPUCTL_REMOTE"
OFF = "none"

SCHEMES = ("file", "sftp", "ssh", "s3", "s3a", "gs", "gcs", "http", "https")
READ_ONLY = ("http", "https")
_SECRET = re.compile(r"(pass|secret|token|credential|key|auth|session|cert)", re.IGNORECASE)
_ALLOWED_KEYS = {"url", "options", "push"}
_STEERING = re.compile(r"^FSSPEC_|ENDPOINT|EMULATOR_HOST")
"""Environment variables that can send one URL to another server (RemoteConfig.identity)."""
_AUTH_METHODS = {"token": {"anon", "google_default", "cloud"}}
"""Secret-sounding option keys whose value may name how to authenticate, never a credential: gcsfs's
`token: anon` (no credentials, for public buckets and emulators) or `google_default` / `cloud` (the
machine's own). Any other value (a token, a key file's path, a mapping) stays refused."""


@dataclass(frozen=True)
class RemoteConfig:
    url: str
    options: dict[str, Any] = field(default_factory=dict)
    push: bool = True
    origin: str = ""
    """Where it was configured (the file, the environment, the command line), for messages."""

    @property
    def scheme(self) -> str:
        return urlsplit(self.url).scheme.lower()

    @property
    def writable(self) -> bool:
        return self.push and self.scheme not in READ_ONLY

    @cached_property
    def identity(self) -> str:
        """What names one remote in this machine's record of what it holds (Database.remote_records):
        the URL, its options and the environment variables that can point the same URL at another
        server (fsspec's configuration, endpoints, emulator hosts). Another value is another remote,
        of which nothing is known yet. Hashed: such a variable may hold a credential."""
        steering = {k: v for k, v in os.environ.items() if _STEERING.search(k)}
        text = json.dumps([self.options, steering], sort_keys=True, separators=(",", ":"), default=str)
        return f"{self.url} {hashlib.sha256(text.encode()).hexdigest()}"


class ConfigError(ValueError):
    """A remote configuration that must not be used; the message is one line."""


def _error(file: Path, node: _yaml.Node, field_path: str, message: str) -> ConfigError:
    from reconciler.spec._errors import SpecError

    return ConfigError(str(SpecError(file, node.mark.line, node.mark.column, field_path, message)))


def _plain(node: _yaml.Node) -> Any:
    from reconciler.spec import _yaml

    if isinstance(node, _yaml.Scalar):
        return node.value
    if isinstance(node, _yaml.Seq):
        return [_plain(item) for item in node.items]
    assert isinstance(node, _yaml.Map)
    return {key: _plain(value) for key, (_, value) in node.entries.items()}


def check_url(url: str) -> str | None:
    """Why a URL cannot be a remote, or None."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in SCHEMES:
        return f"unsupported remote URL scheme {parts.scheme or '(none)'!r}: use one of {', '.join(SCHEMES)}"
    if parts.password is not None:
        return "the URL carries a password: credentials come from the environment or the fsspec configuration"
    if parts.query:
        return "the URL carries a query string: put options under `options`"
    return None


def _check_options(file: Path, node: _yaml.Node, path: str) -> None:
    """Options nest (s3fs's client_kwargs); every key at every depth is checked."""
    from reconciler.spec import _yaml
    from reconciler.spec._errors import SpecError

    if isinstance(node, _yaml.Map):
        for key, (mark, value) in node.entries.items():
            method = value.value if isinstance(value, _yaml.Scalar) else None
            if isinstance(method, str) and method in _AUTH_METHODS.get(key, set()):
                continue
            if _SECRET.search(key):
                where = SpecError(file, mark.line, mark.column, f"{path}.{key}", "")
                raise ConfigError(
                    f"{str(where).rstrip(': ')}: looks like a credential: credentials come from the "
                    "environment or the fsspec configuration, never from the repository"
                )
            _check_options(file, value, f"{path}.{key}")
    elif isinstance(node, _yaml.Seq):
        for index, item in enumerate(node.items):
            _check_options(file, item, f"{path}.{index}")


def read_file(root: Path) -> RemoteConfig | None:
    """The committed configuration, or None when the repository has none (or no `remote` in it).
    The YAML reader is imported only here: a URL given on the command line or in the environment
    needs none of it."""
    file = root / CONFIG_FILE
    if not file.exists() and not file.is_symlink():
        return None
    from reconciler.spec import _yaml
    from reconciler.spec._errors import SpecError, SpecErrors

    try:
        tree = _yaml.read(file)
    except SpecErrors as exc:
        raise ConfigError(str(exc.errors[0])) from None
    if not isinstance(tree, _yaml.Map):
        raise _error(file, tree, "", "expected a mapping with a `remote` entry")
    if "remote" not in tree.entries:
        return None
    _, remote = tree.entries["remote"]
    if not isinstance(remote, _yaml.Map):
        raise _error(file, remote, "remote", "expected a mapping with `url`")
    for key, (mark, _) in remote.entries.items():
        if key not in _ALLOWED_KEYS:
            where = SpecError(file, mark.line, mark.column, f"remote.{key}", "")
            raise ConfigError(
                f"{str(where).rstrip(': ')}: unknown key (known: {', '.join(sorted(_ALLOWED_KEYS))})"
            )
    if "url" not in remote.entries:
        raise _error(file, remote, "remote", "missing `url`")
    _, url_node = remote.entries["url"]
    url = _plain(url_node)
    if not isinstance(url, str):
        raise _error(file, url_node, "remote.url", "expected a URL string")
    if (problem := check_url(url)) is not None:
        raise _error(file, url_node, "remote.url", problem)
    options: dict[str, Any] = {}
    if "options" in remote.entries:
        _, options_node = remote.entries["options"]
        if not isinstance(options_node, _yaml.Map):
            raise _error(file, options_node, "remote.options", "expected a mapping of fsspec options")
        _check_options(file, options_node, "remote.options")
        options = _plain(options_node)
    push = True
    if "push" in remote.entries:
        _, push_node = remote.entries["push"]
        push = _plain(push_node)
        if not isinstance(push, bool):
            raise _error(file, push_node, "remote.push", "expected true or false")
    return RemoteConfig(url, options, push, str(file))


def resolve(root: Path, cli_url: str | None = None) -> RemoteConfig | None:
    """The remote this run uses (None: no remote). A URL given on the command line or in the
    environment replaces the file's URL; the file's options apply only to the file's own URL."""
    for url, origin in ((cli_url, "--remote"), (os.environ.get(ENV_URL), ENV_URL)):
        if url:
            if url.strip().lower() == OFF:
                return None
            if (problem := check_url(url)) is not None:
                raise ConfigError(f"{origin}: {problem}")
            return RemoteConfig(url, {}, True, origin)
    return read_file(root)
