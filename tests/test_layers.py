"""The import rules of the two packages, read from the source with `ast` (every import, at module level or
inside a function, relative ones resolved), so a lazy import breaks them as surely as a top-level one.

- A vendor backend folder (every package under backends/ that is not one of SHARED) sits on top: nothing
  outside it imports its private (`_`) modules or names, and neither the shared libraries of backends/
  nor the reconciler import it at all (the engine reaches stage implementations through the registry,
  by name, and the shared evaluate half through backends.sdk).
- No package of backends/ imports another one's private modules or names: what several need is public.
- backends never import the reconciler.
- Nothing in the reconciler below the CLI imports reconciler.cli.

The same contracts, minus the private-name rule import-linter cannot express, are in pyproject.toml's
[tool.importlinter] for `lint-imports`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SHARED = frozenset({"passes", "tasks", "profiles", "runners", "catalog", "sdk"})
"""The packages of backends/ that are libraries every backend uses, not vendor backends."""


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(root: Path, path: Path) -> Iterator[str]:
    """Every name `path` imports, as dotted paths: a module, or a module's attribute (`a.b.name` for
    `from a.b import name`)."""
    here = module_name(root, path)
    package = here.split(".") if path.name == "__init__.py" else here.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            yield from (module if alias.name == "*" else f"{module}.{alias.name}" for alias in node.names)


def vendors(root: Path) -> frozenset[str]:
    found = (p.name for p in (root / "backends").iterdir() if (p / "__init__.py").is_file())
    return frozenset(name for name in found if name not in SHARED)


def _private(target: list[str]) -> bool:
    """Whether `target` names something private inside its package (backends.onnxruntime._evaluate.x)."""
    return any(part.startswith("_") and not part.startswith("__") for part in target[2:])


def violations(root: Path) -> list[str]:
    """Each broken rule as "importer -> imported: rule"."""
    vendor = vendors(root)
    found = []
    for top in ("backends", "reconciler"):
        for path in sorted((root / top).rglob("*.py")):
            importer = module_name(root, path)
            own = importer.split(".")[:2]
            for name in sorted(set(imports(root, path))):
                target = name.split(".")
                rule = _broken(own, target, vendor)
                if rule:
                    found.append(f"{importer} -> {name}: {rule}")
    return found


def _broken(own: list[str], target: list[str], vendor: frozenset[str]) -> str | None:
    if own[0] == "backends" and target[0] == "reconciler":
        return "backends never import the reconciler"
    if (
        own[0] == "reconciler"
        and target[:2] == ["reconciler", "cli"]
        and own[1:2] not in (["cli"], ["__main__"])
    ):
        return "nothing below the CLI imports it"
    if target[0] != "backends" or len(target) < 2 or target[:2] == own[:2]:
        return None
    if own[0] == "reconciler" and target[1] in vendor:
        return "the reconciler imports no vendor backend folder (the registry and backends.sdk only)"
    if own[0] == "backends" and own[1:2] and own[1] not in vendor and target[1] in vendor:
        return "shared code imports no vendor backend folder"
    if _private(target):
        return f"a private module or name of {'.'.join(target[:2])}"
    return None


def test_the_tree_keeps_the_import_rules() -> None:
    assert violations(ROOT) == []


def test_the_vendor_folders_are_the_backends_not_the_libraries() -> None:
    found = vendors(ROOT)
    assert {"onnxruntime", "openvino", "rknn", "tflite", "coreml"} <= found
    assert not found & SHARED


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in {"backends/__init__.py": "", "reconciler/__init__.py": "", **files}.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in ("backends/onnxruntime", "backends/openvino", "backends/sdk", "reconciler/cli"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "__init__.py").touch()
    return tmp_path


@pytest.mark.parametrize(
    ("path", "text", "rule"),
    [
        (
            "backends/openvino/evaluate.py",
            "def f():\n    from backends.onnxruntime._evaluate import measurements\n",
            "a private module or name of backends.onnxruntime",
        ),
        (
            "backends/openvino/check.py",
            "from backends.onnxruntime import _ortformat\n",
            "a private module or name of backends.onnxruntime",
        ),
        ("backends/sdk/measure.py", "import backends.openvino.evaluate\n", "shared code imports no vendor"),
        ("backends/sdk/measure.py", "from ..openvino import evaluate\n", "shared code imports no vendor"),
        (
            "backends/sdk/errors.py",
            "from reconciler.engine import apply\n",
            "backends never import the reconciler",
        ),
        ("reconciler/gitops/render.py", "from reconciler.cli._render import console\n", "below the CLI"),
        ("reconciler/engine/world.py", "from backends.onnxruntime import fingerprint\n", "no vendor backend"),
    ],
)
def test_each_rule_finds_what_breaks_it(tmp_path: Path, path: str, text: str, rule: str) -> None:
    root = _tree(tmp_path, {path: text})
    found = violations(root)
    assert len(found) == 1 and rule in found[0], found


def test_what_the_rules_allow(tmp_path: Path) -> None:
    """A backend's own private modules, the SDK, the CLI importing itself and the engine, a relative
    import inside a package."""
    root = _tree(
        tmp_path,
        {
            "backends/onnxruntime/_evaluate.py": "from backends.sdk.measure import measurements\n",
            "backends/onnxruntime/_compile.py": "from ._evaluate import x\nfrom backends.onnxruntime import _profile\n",
            "backends/openvino/evaluate.py": "from backends.sdk import measure\nimport backends.onnxruntime\n",
            "reconciler/cli/plan.py": "from reconciler.cli._render import console\nfrom reconciler.engine import plan\n",
            "reconciler/engine/plan.py": "from backends import registry\nfrom backends.sdk.process import run\n",
        },
    )
    assert violations(root) == []


def _contracts() -> dict[str, dict[str, list[str]]]:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["name"]: c for c in config["contracts"]}


def _children(package: str) -> set[str]:
    folder = ROOT / package
    names = {p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__")}
    return names | {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}


def test_the_import_linter_contracts_name_what_the_tree_holds() -> None:
    """The lists in [tool.importlinter] are written out (import-linter has no "every package but");
    a vendor folder, shared module or reconciler package they miss would go unchecked there."""
    contracts = _contracts().values()
    vendor_lists = [
        c["forbidden_modules"] for c in contracts if "backends.onnxruntime" in c["forbidden_modules"]
    ]
    assert len(vendor_lists) == 2
    for listed in vendor_lists:
        assert {m.removeprefix("backends.") for m in listed} == vendors(ROOT)
    shared = next(c["source_modules"] for c in contracts if "backends.sdk" in c["source_modules"])
    assert {m.removeprefix("backends.") for m in shared} == _children("backends") - vendors(ROOT)
    below = next(c["source_modules"] for c in contracts if c["forbidden_modules"] == ["reconciler.cli"])
    assert {m.removeprefix("reconciler.") for m in below} == _children("reconciler") - {"cli"}
