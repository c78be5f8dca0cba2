"""`npuctl artifacts` and `npuctl export` on a real apply: real names, a manifest, verified bytes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.conftest import git, run_npuctl

VARIANTS = """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {name: digits}
spec:
  model: {path: ../models/digits.onnx, version: v1}
  target: cpu
  inputs: {image: [1, 1, 8, 8]}
  shape_variants: [{image: [4, 1, 8, 8]}]
  evaluate: {warmup: 1, runs: 5}
  slo: {size_mb: 5}
"""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_apply_says_where_the_artifacts_are_and_export_copies_them(digits_repo: Path, tmp_path: Path) -> None:
    (digits_repo / "specs" / "digits.yaml").write_text(VARIANTS)
    applied = run_npuctl(digits_repo, "apply")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "digits: artifacts model.ort in .npuctl/store (npuctl export digits DIR)" in applied.stdout

    listed = json.loads(run_npuctl(digits_repo, "artifacts", "digits", "--json").stdout)
    rows = listed["artifacts"]
    assert {r["variant"] for r in rows} == {"default", "image=4x1x8x8"}
    for row in rows:
        assert _sha(digits_repo / row["path"]) == row["sha256"], "the listed path holds the listed bytes"
    assert sum(r["entry"] for r in rows) == 2, "one entry file per variant"

    out = tmp_path / "deploy"
    done = run_npuctl(digits_repo, "export", "digits", str(out))
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert [v["inputs"]["image"] for v in manifest["variants"]] == [[1, 1, 8, 8], [4, 1, 8, 8]]
    for variant in manifest["variants"]:
        entry = out / variant["artifact"]["file"]
        assert entry.suffix == ".ort" and _sha(entry) == variant["artifact"]["sha256"]
    sums = [line.split("  ") for line in (out / "SHA256SUMS").read_text().splitlines()]
    assert {name for _, name in sums} == {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()} - {
        "SHA256SUMS"
    }
    assert all(_sha(out / name) == digest for digest, name in sums)


def test_export_refuses_a_corrupt_store_object_and_a_non_empty_folder(
    digits_repo: Path, tmp_path: Path
) -> None:
    assert run_npuctl(digits_repo, "apply").returncode == 0
    row = json.loads(run_npuctl(digits_repo, "artifacts", "digits", "--json").stdout)["artifacts"][0]
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    refused = run_npuctl(digits_repo, "export", "digits", str(busy))
    assert refused.returncode == 1 and "exists and is not empty" in refused.stderr

    stored = digits_repo / row["path"]
    stored.chmod(0o644)
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 0xFF
    stored.write_bytes(bytes(data))
    out = tmp_path / "out"
    done = run_npuctl(digits_repo, "export", "digits", str(out))
    assert done.returncode == 1
    assert "does not match its recorded digest" in done.stderr and row["file"] in done.stderr
    assert not out.exists(), "an export that failed leaves no half folder"


def test_a_clone_without_the_store_says_what_to_do(digits_repo: Path, tmp_path: Path) -> None:
    assert run_npuctl(digits_repo, "apply").returncode == 0
    git(digits_repo, "add", "-A")
    git(digits_repo, "commit", "-qm", "applied")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(digits_repo), str(clone))
    listed = run_npuctl(clone, "artifacts", "digits")
    assert listed.returncode == 0 and "not in the local store" in listed.stdout
    done = run_npuctl(clone, "export", "digits", str(tmp_path / "out"))
    assert done.returncode == 1 and "not in the local store" in done.stderr and "npuctl apply" in done.stderr
