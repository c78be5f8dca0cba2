"""Virtual environments the tests build inside the interpreter that runs them, importing what that
interpreter imports.

`python -m venv --system-site-packages` is not that: a venv is always built over the base interpreter
(`sys._base_executable`), so inside a venv "system" means the base interpreter's site-packages, not the
packages of the venv the tests run in (on a fresh machine: none of them). Instead the nested venv gets a
`.pth` file whose `import` line runs `site.addsitedir` on each site-packages folder of this interpreter's
`sys.path`, in order. `addsitedir` appends each folder after the nested venv's own site-packages (what pip
installs there wins) and processes the `.pth` files it holds (editable installs, namespace packages),
which a plain path line would not. A `.pth` file rather than PYTHONPATH because npuctl starts its
children with `python -I`, which ignores PYTHON* variables but still reads site-packages.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PTH = "npuctl-tests-outer.pth"


def site_folders() -> list[Path]:
    """The site-packages folders this interpreter imports from, in `sys.path` order."""
    return [
        Path(p) for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()
    ]


def site_packages(venv: Path) -> Path:
    """A venv's own site-packages folder (the layout `python -m venv` makes on POSIX)."""
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def pth_lines(first: list[Path], over: list[Path]) -> str:
    """The `.pth` text: `first` as plain path lines, then every folder of `over` added as a site dir."""
    lines = [str(p) for p in first]
    lines += [f"import site; site.addsitedir({str(p)!r})" for p in over]
    return "".join(f"{line}\n" for line in lines)


def create(where: Path, first: list[Path] | None = None, *, pip: bool = True) -> Path:
    """A venv at `where` importing, after its own packages, `first` (this checkout, say), then this
    interpreter's site-packages; its interpreter's path. `pip=False` skips installing pip into it."""
    argv = [sys.executable, "-m", "venv", str(where)]
    subprocess.run(argv if pip else [*argv, "--without-pip"], check=True)
    (site_packages(where) / PTH).write_text(pth_lines(first or [], site_folders()))
    return where / "bin" / "python"
