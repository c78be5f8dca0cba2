"""The deployable files of a spec, as its lock file records them: list them, or copy them out.

The store names objects by digest, which is right for a cache and useless to an app developer. What
ships is the compile stage's output of every shape variant, under the file names the toolchain gave
them, beside a shape-variant manifest (backends.passes.variants) and a SHA256SUMS list (`sha256sum -c`).
Every byte copied out is hashed on the way and compared with the digest the lock file recorded, so a
corrupt store object is never exported.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from backends.passes import variants
from reconciler.state.lockread import LockedStage, LockView
from reconciler.state.store import Store

CHUNK = 1 << 20


class ExportError(Exception):
    """One line: why the spec's artifacts cannot be listed or exported here."""


@dataclass(frozen=True)
class Artifact:
    variant: str
    name: str
    """The compile stage's name for it (e.g. openvino_xml)."""
    file: str
    digest: str
    size: int
    stored: Path | None
    """Where it lies in the local store; None when only the lock file records it."""


@dataclass(frozen=True)
class Variant:
    name: str
    inputs: dict[str, list[int]]
    artifacts: tuple[Artifact, ...]
    entry: str | None = None
    """The artifact an app opens, as the compile stage's registration names it (None: not named)."""
    artifact_inputs: tuple[dict[str, Any], ...] = ()
    """The inputs the artifact itself declares, as the lock records them (empty: the model's)."""

    @property
    def folder(self) -> str:
        """Where this variant's files go in an export: the top for a single variant, else one folder per
        input shape (file names repeat across variants)."""
        return variants.shape_key(self.inputs).replace("=", "-").replace(";", "_")


def deployables(lock: LockView, store: Store, root: Path) -> list[Variant]:
    """Every variant's compile output; ExportError when a variant has none recorded, or when its
    compile record is not from a trusted builder (reconciler.trust: it may name any object)."""
    from reconciler.trust import policy
    from reconciler.trust.signing import Trust

    trust = Trust.here(policy.read(root))
    out = []
    for name, variant in sorted(lock.variants.items(), key=lambda kv: (kv[0] != "default", kv[0])):
        why = trust.distrusted(variant.raw).get("compile")
        if why is not None:
            raise ExportError(
                f"variant {name!r}: the compile record is {why}: run `npuctl apply` to build it here"
            )
        compile_stage = variant.stages.get("compile")
        if compile_stage is None or not compile_stage.artifacts:
            raise ExportError(f"variant {name!r} has no compiled artifact recorded: run `npuctl apply`")
        arts = tuple(
            Artifact(
                name,
                art_name,
                meta.file,
                meta.digest,
                meta.size,
                store.path(meta.digest) if store.has(meta.digest) else None,
            )
            for art_name, meta in sorted(compile_stage.artifacts.items())
        )
        inputs = {k: list(v) for k, v in variant.inputs.items()}
        declared = tuple(i.raw for i in variant.artifact_inputs)
        out.append(Variant(name, inputs, arts, _entry(lock, compile_stage), declared))
    if not out:
        raise ExportError("the lock file records no variant: run `npuctl apply`")
    return out


def _entry(lock: LockView, compiled: LockedStage) -> str | None:
    """The entry artifact the registration of the implementation that built the compile stage names
    (read from the backend's stage table: no toolchain needed); None when that is not known here."""
    from backends import registry
    from backends.catalog import targets

    target = targets().get(lock.target)
    if target is None:
        return None
    fields = compiled.inputs.get("fields") or {}
    override = (fields.get("compile") or {}).get("backend")
    try:
        found = registry.backend_for(target, override).stages.get("compile")
    except Exception:  # a backend not installed here: fall back to the file types
        return None
    built_by = compiled.impl.get("name")
    return found.entry if found is not None and found.name == built_by else None


def fetched(found: Sequence[Variant], store: Store, fetch: Callable[[str, int], bool]) -> list[Variant]:
    """The variants with every object the local store lacks brought into it by `fetch(digest, size)`
    (the remote cache's verified download); ExportError naming what neither holds."""
    out, missing = [], []
    for variant in found:
        arts = []
        for art in variant.artifacts:
            if art.stored is None and fetch(art.digest, art.size) and store.has(art.digest):
                art = replace(art, stored=store.path(art.digest))
            if art.stored is None:
                missing.append(art.file)
            arts.append(art)
        out.append(replace(variant, artifacts=tuple(arts)))
    if missing:
        raise ExportError(
            f"in neither the local store nor the remote cache: {', '.join(sorted(set(missing)))} "
            "(`npuctl push` them from a machine that built them)"
        )
    return out


def primary(variant: Variant) -> Artifact:
    """The file an app loads first: the artifact the compile stage's registration names, else the one
    it named `model`, else by file type."""
    named = [a for a in variant.artifacts if a.name == (variant.entry or "model")]
    if named:
        return named[0]
    entry = variants.entry_file([a.file for a in variant.artifacts])
    return next(a for a in variant.artifacts if a.file == entry)


def export(found: Sequence[Variant], dest: Path, model: str, target: str) -> list[Path]:
    """Copies every file (verified) into `dest`, then manifest.json and SHA256SUMS. Written into a
    temporary folder beside `dest` and moved into place, so an interrupted export leaves no half folder."""
    missing = [a for v in found for a in v.artifacts if a.stored is None]
    if missing:
        names = ", ".join(sorted({a.file for a in missing}))
        raise ExportError(
            f"not in the local store: {names} (recorded in the lock file): run `npuctl apply` here to build them"
        )
    if dest.exists() and any(dest.iterdir()):
        raise ExportError(f"{dest} exists and is not empty")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        single = len(found) == 1
        results, sums = [], []
        for variant in found:
            folder = "" if single else variant.folder
            for art in variant.artifacts:
                relative = f"{folder}/{art.file}" if folder else art.file
                _copy_verified(art, staging / relative)
                sums.append(f"{art.digest}  {relative}")
            main = primary(variant)

            def placed(a: Artifact, folder: str = folder) -> str:
                return f"{folder}/{a.file}" if folder else a.file

            files = [{"file": placed(a), "sha256": a.digest, "size": a.size} for a in variant.artifacts]
            extra: dict[str, Any] = {"files": files}
            if variant.artifact_inputs:
                extra["artifact_inputs"] = [dict(i) for i in variant.artifact_inputs]
            results.append(
                variants.VariantResult(variant.inputs, placed(main), main.digest, main.size, extra)
            )
        manifest = variants.build_manifest(model, target, results)
        variants.write_manifest(staging / "manifest.json", manifest)
        manifest_digest = hashlib.sha256((staging / "manifest.json").read_bytes()).hexdigest()
        sums.append(f"{manifest_digest}  manifest.json")
        (staging / "SHA256SUMS").write_text("\n".join(sorted(sums, key=lambda s: s.split("  ", 1)[1])) + "\n")
        if dest.exists():
            dest.rmdir()
        os.replace(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return sorted(p for p in dest.rglob("*") if p.is_file())


def _copy_verified(art: Artifact, target: Path) -> None:
    assert art.stored is not None
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with art.stored.open("rb") as src, target.open("wb") as out:
        while chunk := src.read(CHUNK):
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != art.digest:
        raise ExportError(
            f"{art.file}: the store object {art.stored} does not match its recorded digest {art.digest[:12]}… "
            "(corrupt store: run `npuctl apply` to rebuild it)"
        )
