"""The shape-variant manifest: which artifact serves which input shape, for the app to pick at run time.

The engine builds one stage chain per shape variant (spec.inputs plus each spec.shape_variants entry)
and then calls `build_manifest` with one `VariantResult` per chain; the manifest is written next to the
artifacts as `manifest.json`. Deterministic: variants sorted by their shapes, sorted keys.

    build_manifest(model_name: str, target: str, results: Sequence[VariantResult]) -> dict
    write_manifest(path: Path, manifest: Mapping) -> Path
    select(manifest: Mapping, shapes: Mapping[str, Sequence[int]]) -> dict | None   # the app side

Manifest format (format_version 1):

    {"format_version": 1, "model": "ppocr-rec", "target": "rk3588",
     "inputs": ["x"],
     "variants": [{"key": "x=1x3x48x320", "inputs": {"x": [1, 3, 48, 320]},
                   "artifact": {"file": "rec_48x320.rknn", "sha256": "...", "size": 123}},
                  ...]}
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1

ENTRY_SUFFIXES = (".onnx", ".ort", ".xml", ".rknn", ".tflite", ".dlc", ".om", ".mlpackage")
"""File types a runtime opens first, by preference: when a compile stage writes several files (OpenVINO's
.xml beside its .bin weights), the manifest's `artifact` is the one the app loads; all are in `files`."""


def entry_file(files: Sequence[str]) -> str:
    """The file an app opens first among one variant's files (ENTRY_SUFFIXES order, else the first)."""
    for suffix in ENTRY_SUFFIXES:
        for name in sorted(files):
            if name.endswith(suffix):
                return name
    return sorted(files)[0]


@dataclass(frozen=True)
class VariantResult:
    """One built shape variant: its input shapes and its deployable artifact."""

    inputs: Mapping[str, Sequence[int]]
    file: str
    """The artifact's file name as the app will find it (relative to the manifest)."""
    sha256: str
    size: int = 0
    extra: Mapping[str, Any] | None = None
    """Anything else worth shipping per variant (e.g. measured latency); copied as is."""

    @classmethod
    def from_file(
        cls, inputs: Mapping[str, Sequence[int]], path: Path, name: str | None = None
    ) -> VariantResult:
        """A result for an artifact on disk (digest and size read from the file)."""
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        return cls(inputs, name or path.name, digest.hexdigest(), path.stat().st_size)


def shape_key(inputs: Mapping[str, Sequence[int]]) -> str:
    """A stable text key: inputs sorted by name, dims joined by 'x' (e.g. "x=1x3x48x320")."""
    return ";".join(f"{name}={'x'.join(str(int(d)) for d in inputs[name])}" for name in sorted(inputs))


def build_manifest(model_name: str, target: str, results: Sequence[VariantResult]) -> dict[str, Any]:
    """The manifest for one deployment; raises ValueError on duplicate or inconsistent variants."""
    names = {tuple(sorted(r.inputs)) for r in results}
    if len(names) > 1:
        raise ValueError(f"variants name different inputs: {sorted(names)}")
    seen: dict[str, str] = {}
    variants = []
    for r in sorted(results, key=lambda r: [list(map(int, r.inputs[n])) for n in sorted(r.inputs)]):
        key = shape_key(r.inputs)
        if key in seen:
            raise ValueError(f"two artifacts for {key}: {seen[key]} and {r.file}")
        seen[key] = r.file
        entry: dict[str, Any] = {
            "key": key,
            "inputs": {n: [int(d) for d in r.inputs[n]] for n in sorted(r.inputs)},
            "artifact": {"file": r.file, "sha256": r.sha256, "size": int(r.size)},
        }
        if r.extra:
            entry["extra"] = dict(r.extra)
        variants.append(entry)
    return {
        "format_version": FORMAT_VERSION,
        "model": model_name,
        "target": target,
        "inputs": sorted(next(iter(names))) if names else [],
        "variants": variants,
    }


def write_manifest(path: Path, manifest: Mapping[str, Any]) -> Path:
    path.write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n")
    return path


def select(manifest: Mapping[str, Any], shapes: Mapping[str, Sequence[int]]) -> dict[str, Any] | None:
    """The variant whose shapes equal `shapes` exactly, else None (what an app does at run time)."""
    key = shape_key(shapes)
    return next((dict(v) for v in manifest["variants"] if v["key"] == key), None)
