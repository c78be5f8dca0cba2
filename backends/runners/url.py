"""`evaluate.runner` URLs, parsed strictly: `local`, `ssh://user@host[:port]`, `adb://serial`.

The URL comes from an untrusted spec and its parts become arguments of `ssh`, `scp` and `adb`, so each
part must be what it claims to be and never look like an option: `ssh://-Fx@y` would otherwise reach
ssh as `-Fx@y` (read config file `x@y`, which a pull request can add). User names, host names and
serials start with a letter or digit; ports are 1-65535; no path, query or fragment is accepted
(the runner picks its own remote folder). The spec schema (reconciler/spec/models.py) uses
`PATTERN`; the runners parse with `parse`, so both refuse the same strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_USER = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}"
_HOSTNAME = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*"
_IPV6 = r"\[[0-9A-Fa-f:.]{2,45}\]"
_PORT = r"[0-9]{1,5}"
_SERIAL = r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}"

SSH = re.compile(rf"ssh://(?P<user>{_USER})@(?P<host>{_HOSTNAME}|{_IPV6})(?::(?P<port>{_PORT}))?")
ADB = re.compile(rf"adb://(?P<serial>{_SERIAL})")
PATTERN = rf"^(local|ssh://{_USER}@({_HOSTNAME}|{_IPV6})(:{_PORT})?|adb://{_SERIAL})$"
"""The whole-string pattern the spec schema checks (the same parts as `parse`)."""


class RunnerUrlError(ValueError):
    """A runner URL that is not exactly one of the accepted forms; the message is one line."""


@dataclass(frozen=True)
class RunnerUrl:
    scheme: str
    """"local", "ssh" or "adb"."""
    user: str = ""
    host: str = ""
    """Host name, IPv4 address, or IPv6 address without its brackets; the adb serial for adb."""
    port: int = 22


def parse(url: str) -> RunnerUrl:
    if url == "local":
        return RunnerUrl("local")
    if url.startswith("ssh://"):
        match = SSH.fullmatch(url)
        if match is None:
            raise RunnerUrlError(
                f"{url!r}: expected ssh://user@host[:port] (user and host start with a letter or digit; "
                "no path, query or options)"
            )
        port = int(match["port"]) if match["port"] else 22
        if not 1 <= port <= 65535:
            raise RunnerUrlError(f"{url!r}: port {port} is outside 1-65535")
        return RunnerUrl("ssh", match["user"], match["host"].strip("[]"), port)
    if url.startswith("adb://"):
        match = ADB.fullmatch(url)
        if match is None:
            raise RunnerUrlError(f"{url!r}: expected adb://serial (a letter or digit first; no options)")
        return RunnerUrl("adb", host=match["serial"], port=0)
    raise RunnerUrlError(f"unknown runner {url!r} (local, ssh://user@host[:port], adb://serial)")
