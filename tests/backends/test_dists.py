"""backends.sdk.dists answers what importlib.metadata answers, for every installed distribution."""

from __future__ import annotations

import importlib.metadata as metadata
import subprocess
from pathlib import Path

from backends.sdk import dists
from backends.sdk.process import python_argv


def test_every_installed_version_matches_importlib_metadata() -> None:
    names = {d.metadata["Name"] for d in metadata.distributions() if d.metadata["Name"]}
    assert len(names) > 20
    for name in sorted(names):
        assert dists.version(name) == metadata.version(name), name
    assert dists.version("Onnx_Runtime".replace("_", "")) == metadata.version("onnxruntime")
    assert dists.version("no-such-distribution-npuctl") is None


def test_a_group_is_declared_exactly_when_entry_points_has_it() -> None:
    groups = {ep.group for d in metadata.distributions() for ep in d.entry_points}
    assert "console_scripts" in groups
    for group in groups:
        assert dists.may_declare(group), group
    assert not dists.may_declare("npuctl.no-such-group")


def test_a_plugin_declared_in_a_new_folder_is_seen(tmp_path: Path) -> None:
    """A distribution on sys.path that declares the catalog group: the scan defers to importlib."""
    info = tmp_path / "npuctl_fake_plugin-1.2.post3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: npuctl-fake-plugin\nVersion: 1.2.post3\n\n")
    (info / "entry_points.txt").write_text("[npuctl.catalog]\nfake = npuctl_fake_plugin\n")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from backends.sdk import dists;"
        "print(dists.version('npuctl.fake_plugin'), dists.may_declare('npuctl.catalog'))"
    )
    done = subprocess.run(python_argv("-c", code, str(tmp_path)), capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["1.2.post3", "True"]
