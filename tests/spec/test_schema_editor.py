"""The schema in a real editor: yaml-language-server (npm) over stdio, as VS Code and Neovim run it.

`.ci/setup` installs the server under ~/.cache/npuctl/node (NPUCTL_YAML_LS overrides the path).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER = Path(
    os.environ.get(
        "NPUCTL_YAML_LS",
        Path.home() / ".cache/npuctl/node/node_modules/yaml-language-server/bin/yaml-language-server",
    )
)


class LanguageServer:
    """A minimal LSP client: Content-Length framed JSON-RPC over the server's stdin/stdout."""

    def __init__(self, root: Path) -> None:
        assert shutil.which("node"), "node is required (the machine image ships it)"
        assert SERVER.is_file(), f"yaml-language-server not installed at {SERVER}: run .ci/setup"
        self.proc = subprocess.Popen(
            ["node", str(SERVER), "--stdio"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.buffer = b""
        self.diagnostics: dict[str, list[dict[str, Any]]] = {}
        self.request(1, "initialize", {"processId": None, "rootUri": root.as_uri(), "capabilities": {}})
        self.notify("initialized", {})
        settings = {"yaml": {"validate": True, "completion": True, "schemaStore": {"enable": False}}}
        self.notify("workspace/didChangeConfiguration", {"settings": settings})

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.send({"method": method, "params": params})

    def request(self, ident: int, method: str, params: dict[str, Any], timeout: float = 30) -> Any:
        self.send({"id": ident, "method": method, "params": params})
        for message in self.messages(timeout):
            if message.get("id") == ident and "method" not in message:
                return message.get("result")
        raise AssertionError(f"no answer to {method} within {timeout} s")

    def messages(self, timeout: float) -> Iterator[dict[str, Any]]:
        """Server messages until `timeout`; answers the server's own requests (configuration) with null."""
        assert self.proc.stdout is not None
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            head, sep, rest = self.buffer.partition(b"\r\n\r\n")
            if sep:
                length = int(
                    next(
                        h for h in head.decode().split("\r\n") if h.lower().startswith("content-length")
                    ).split(":")[1]
                )
                if len(rest) >= length:
                    self.buffer = rest[length:]
                    message = json.loads(rest[:length])
                    if message.get("method") == "textDocument/publishDiagnostics":
                        self.diagnostics[message["params"]["uri"]] = message["params"]["diagnostics"]
                    elif "method" in message and "id" in message:
                        self.send({"id": message["id"], "result": None})
                    yield message
                    continue
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, end - time.monotonic()))
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                assert chunk, "yaml-language-server exited"
                self.buffer += chunk

    def open(self, path: Path, text: str | None = None) -> str:
        uri = path.as_uri()
        document = {
            "uri": uri,
            "languageId": "yaml",
            "version": 1,
            "text": text if text is not None else path.read_text(),
        }
        self.notify("textDocument/didOpen", {"textDocument": document})
        return uri

    def diagnostics_of(self, uri: str, timeout: float = 30) -> list[dict[str, Any]]:
        for _ in self.messages(timeout):
            if uri in self.diagnostics:
                return self.diagnostics[uri]
        raise AssertionError(f"no diagnostics published for {uri}")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def server() -> Iterator[LanguageServer]:
    ls = LanguageServer(ROOT)
    yield ls
    ls.close()


def _spec_files() -> list[Path]:
    return sorted(
        p for p in (ROOT / "specs").glob("*.yaml") if "yaml-language-server: $schema=" in p.read_text()
    )


@pytest.mark.parametrize("path", _spec_files(), ids=lambda p: p.name)
def test_the_repository_specs_show_no_diagnostics_in_the_editor(server: LanguageServer, path: Path) -> None:
    assert server.diagnostics_of(server.open(path)) == []


def test_a_mistyped_target_is_flagged_and_targets_complete(server: LanguageServer) -> None:
    """The negative control (the server really validates against the schema), then completion."""
    spec = ROOT / "specs" / "editor-probe.yaml"  # never written: the text is sent over the protocol
    head = (
        "# yaml-language-server: $schema=../schemas/deployment.schema.json\n"
        "apiVersion: npuctl/v1\nkind: Deployment\nextends: digits.base.yaml\nmetadata: {name: probe}\nspec:\n"
    )
    bad = server.diagnostics_of(server.open(spec, head + "  target: cpuu\n"))
    assert [d["range"]["start"]["line"] for d in bad] == [6], bad
    assert "cpuu" not in bad[0]["message"] and "intel-npu" in bad[0]["message"]

    other = ROOT / "specs" / "editor-probe-2.yaml"
    server.open(other, head + "  target: \n")
    result = server.request(
        7,
        "textDocument/completion",
        {"textDocument": {"uri": other.as_uri()}, "position": {"line": 6, "character": 10}},
    )
    items = result["items"] if isinstance(result, dict) else result
    import backends.catalog as catalog

    labels = {item["label"] for item in items}
    assert set(catalog.targets()) <= labels, labels
    rk = next(item for item in items if item["label"] == "rk3588")
    assert "rknn" in json.dumps(rk.get("documentation", "")), rk
