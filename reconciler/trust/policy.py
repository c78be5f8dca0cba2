"""The trust policy: `npuctl-trust.yaml` at the repository root names the public keys whose records
count, each with a name (as Nix lists `trusted-public-keys` and git an allowed-signers file):

    trusted-keys:
      - name: release-ci
        key: ed25519:Xk2...=
      - name: alice
        key: ed25519:9aQ...=

Read with the safe YAML composer (no objects constructed), bounded in size; a malformed file is one
error naming file, line, column and field, and trusts nobody (never everybody).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from backends.sdk import pathpolicy
from reconciler.trust.keys import KeyProblem, PublicKey

FILE = "npuctl-trust.yaml"
MAX_BYTES = 64 << 10
FIELDS = ("name", "key")


class PolicyError(ValueError):
    """`file:line:column: field: why`."""


@dataclass
class Policy:
    given: dict[str, str] | None = None
    """Public key text -> name, when built in code; else read from `text` on first use."""
    text: str = ""
    """The file as read ("" when absent): two policies differ exactly when their texts do."""
    file: str = FILE

    @cached_property
    def names(self) -> dict[str, str]:
        """Public key text -> its name. Parsed on first use (a machine reading only records it signed
        itself never loads the YAML parser); raises PolicyError."""
        return dict(self.given) if self.given is not None else _names(self.text, self.file)

    def name_of(self, key: str) -> str | None:
        return self.names.get(key)


def _at(file: str, mark: Any, dotted: str, why: str) -> PolicyError:
    line, column = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
    return PolicyError(f"{file}:{line}:{column}: " + (f"{dotted}: " if dotted else "") + why)


def _where(file: str, node: Any, dotted: str, why: str) -> PolicyError:
    return _at(file, getattr(node, "start_mark", None), dotted, why)


def _entry(file: str, index: int, item: object, names: dict[str, str]) -> None:
    import yaml

    where = f"trusted-keys[{index}]"
    if not isinstance(item, yaml.MappingNode):
        raise _where(file, item, where, "expected a mapping with name and key")
    values: dict[str, str] = {}
    for key_node, value_node in item.value:
        name = key_node.value
        if name not in FIELDS:
            raise _where(file, key_node, f"{where}.{name}", f"unknown field (expected {', '.join(FIELDS)})")
        if not isinstance(value_node, yaml.ScalarNode) or value_node.tag != "tag:yaml.org,2002:str":
            raise _where(file, value_node, f"{where}.{name}", "expected a string")
        values[name] = value_node.value
    missing = [f for f in FIELDS if not values.get(f)]
    if missing:
        raise _where(file, item, f"{where}.{missing[0]}", "missing")
    try:
        public = PublicKey.parse(values["key"])
    except KeyProblem as exc:
        raise _where(file, item, f"{where}.key", str(exc)) from None
    if public.text in names:
        raise _where(file, item, f"{where}.key", f"listed twice (also as {names[public.text]!r})")
    names[public.text] = values["name"]


def parse(text: str, file: str) -> Policy:
    """The policy in `text`, checked now; PolicyError naming the place of the first problem."""
    parsed = Policy(None, text, file)
    parsed.names  # noqa: B018 - parsed now, so that a bad file is said where it is read
    return parsed


def _names(text: str, file: str) -> dict[str, str]:
    if not text.strip():
        return {}
    import yaml

    if len(text.encode()) > MAX_BYTES:
        raise PolicyError(f"{file}:0:0: file exceeds {MAX_BYTES} bytes")
    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        raise _at(file, exc.problem_mark, "", f"invalid YAML: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"{file}:0:0: invalid YAML: {exc}") from None
    names: dict[str, str] = {}
    if root is None:
        return names
    if not isinstance(root, yaml.MappingNode):
        raise _where(file, root, "", "expected a mapping with trusted-keys")
    for key_node, value_node in root.value:
        if key_node.value != "trusted-keys":
            raise _where(file, key_node, str(key_node.value), "unknown field (expected trusted-keys)")
        if isinstance(value_node, yaml.ScalarNode) and value_node.tag == "tag:yaml.org,2002:null":
            continue
        if not isinstance(value_node, yaml.SequenceNode):
            raise _where(file, value_node, "trusted-keys", "expected a list")
        for index, item in enumerate(value_node.value):
            _entry(file, index, item, names)
    return names


def read(root: Path) -> Policy:
    """The work tree's policy (parsed on first use); an empty one when the file is absent. Raises
    PolicyError for a file that cannot be read."""
    path = root / FILE
    if not path.exists() and not path.is_symlink():
        return Policy()
    try:
        with pathpolicy.open_regular(path) as fh:
            raw = fh.read(MAX_BYTES + 1)
    except (OSError, ValueError) as exc:
        raise PolicyError(f"{path}:0:0: cannot read: {exc}") from None
    if len(raw) > MAX_BYTES:
        raise PolicyError(f"{path}:0:0: file exceeds {MAX_BYTES} bytes")
    try:
        return Policy(None, raw.decode("utf-8"), str(path))
    except UnicodeDecodeError:
        raise PolicyError(f"{path}:0:0: not UTF-8 text") from None
