"""The remote configuration: committed file, environment and CLI order; credentials refused with their place."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.remote.config import ENV_URL, ConfigError, RemoteConfig, read_file, resolve


def _write(root: Path, text: str) -> Path:
    path = root / ".npuctl.yaml"
    path.write_text(text)
    return path


def test_file_gives_url_options_and_push(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "remote:\n  url: s3://bucket/cache\n  options: {endpoint_url: 'http://127.0.0.1:9'}\n  push: false\n",
    )
    config = read_file(tmp_path)
    assert config is not None
    assert (config.url, config.options, config.push) == (
        "s3://bucket/cache",
        {"endpoint_url": "http://127.0.0.1:9"},
        False,
    )
    assert not config.writable


def test_a_token_naming_an_auth_method_is_not_a_credential(tmp_path: Path) -> None:
    """gcsfs's `token: anon` (emulators, public buckets) holds no secret; a token's value would."""
    _write(tmp_path, "remote:\n  url: gs://bucket/cache\n  options: {token: anon}\n")
    config = read_file(tmp_path)
    assert config is not None and config.options == {"token": "anon"}


def test_no_file_or_no_remote_entry_is_no_remote(tmp_path: Path) -> None:
    assert read_file(tmp_path) is None
    _write(tmp_path, "other: 1\n")
    assert read_file(tmp_path) is None


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        (
            "remote:\n  url: s3://b\n  options:\n    secret: abc\n",
            ":4:5: remote.options.secret",
            "credential",
        ),
        (
            "remote:\n  url: s3://b\n  options:\n    client_kwargs: {aws_access_key_id: x}\n",
            ":4:21: remote.options.client_kwargs.aws_access_key_id",
            "credential",
        ),
        (
            "remote:\n  url: gs://b\n  options: {token: ya29.a0AfB_secret}\n",
            ":3:13: remote.options.token",
            "credential",
        ),
        (
            "remote:\n  url: gs://b\n  options: {token: /keys/sa.json}\n",
            ":3:13: remote.options.token",
            "credential",
        ),
        ("remote:\n  url: sftp://me:hunter2@host/x\n", ":2:8: remote.url", "password"),
        ("remote:\n  url: ftp://host/x\n", ":2:8: remote.url", "unsupported"),
        ("remote:\n  uri: s3://b\n", ":2:3: remote.uri", "unknown key"),
        ("remote:\n  url: s3://b\n  push: maybe\n", ":3:9: remote.push", "true or false"),
    ],
)
def test_refused_configurations_name_file_line_column_and_field(
    tmp_path: Path, text: str, where: str, words: str
) -> None:
    _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        read_file(tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert f".npuctl.yaml{where}" in message, message
    assert words in message


def test_cli_beats_environment_beats_file_and_none_turns_it_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, "remote: {url: 'file:///from/file'}\n")
    monkeypatch.delenv(ENV_URL, raising=False)
    assert resolve(tmp_path).url == "file:///from/file"  # type: ignore[union-attr]
    monkeypatch.setenv(ENV_URL, "file:///from/env")
    assert resolve(tmp_path).url == "file:///from/env"  # type: ignore[union-attr]
    assert resolve(tmp_path, "file:///from/cli").url == "file:///from/cli"  # type: ignore[union-attr]
    assert resolve(tmp_path, "none") is None
    monkeypatch.setenv(ENV_URL, "none")
    assert resolve(tmp_path) is None
    with pytest.raises(ConfigError, match=r"--remote: .*password"):
        resolve(tmp_path, "s3://k:s@bucket/x")


def test_a_remote_is_another_when_its_url_options_or_endpoint_variables_differ(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What this machine records of a remote's records is kept per identity: one bucket name behind
    another endpoint is another remote, and a variable that may hold a credential is hashed, not kept."""
    monkeypatch.delenv("FSSPEC_S3_ENDPOINT_URL", raising=False)
    base = RemoteConfig("s3://bucket/cache").identity
    assert base == RemoteConfig("s3://bucket/cache").identity
    assert base.startswith("s3://bucket/cache ")
    assert RemoteConfig("s3://bucket/other").identity != base
    assert RemoteConfig("s3://bucket/cache", {"endpoint_url": "http://127.0.0.1:9"}).identity != base
    monkeypatch.setenv("FSSPEC_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    assert RemoteConfig("s3://bucket/cache").identity != base
    monkeypatch.setenv("FSSPEC_S3_SECRET", "hunter2")
    steered = RemoteConfig("s3://bucket/cache").identity
    assert "hunter2" not in steered
    monkeypatch.setenv("UNRELATED_SETTING", "1")
    assert RemoteConfig("s3://bucket/cache").identity == steered
