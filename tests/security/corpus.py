"""The hostile-input corpus: one row per attack on a repository's specs, paths and input files.

Each case writes its spec `specs/h-<id>.yaml` (and whatever files it needs) into a repository that
also holds the valid digits spec, and states what must come out: the field the one-line error names,
a fragment of its message, and when it is found (`spec`: by validate, located file:line:col; `file`:
a whole-file problem of the spec file itself, no position; `build`: an input file's content, found
by the stage reading it, terminal, never retried; `ok`: a contained case that builds, e.g. a hard
link, whose check is that nothing outside changed). Outside the repository sits a sandbox folder of
canaries that every case tries to reach; the test traces the run and asserts none was opened.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx


@dataclass
class Ctx:
    repo: Path
    outside: Path
    sockets: list[socket.socket] = field(default_factory=list)

    def write(self, rel: str, data: bytes | str) -> Path:
        path = self.repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        return path

    def link(self, rel: str, target: str | Path) -> Path:
        path = self.repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)
        return path

    def fifo(self, rel: str) -> Path:
        path = self.repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)
        return path

    def sock(self, rel: str) -> Path:
        path = self.repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        self.sockets.append(server)
        return path

    def data(self, case: str, extra: dict[str, bytes | Path | str] | None = None, good: int = 2) -> str:
        """A data folder `hostile/<case>/` with `good` real samples plus the hostile members; returns
        its path relative to specs/."""
        folder = self.repo / "hostile" / case
        folder.mkdir(parents=True, exist_ok=True)
        for src in sorted((self.repo / "data" / "eval").glob("*.npy"))[:good]:
            (folder / src.name).write_bytes(src.read_bytes())
        for name, what in (extra or {}).items():
            if isinstance(what, bytes):
                (folder / name).write_bytes(what)
            elif what == "fifo":
                os.mkfifo(folder / name)
            elif what == "socket":
                self.sock(f"hostile/{case}/{name}")
            else:
                (folder / name).symlink_to(what)
        return f"../hostile/{case}"


class Raw(str):
    """A YAML value written as is (numbers, .inf, flow lists), not as a quoted string."""


def _yaml(value: object) -> str:
    return str(value) if isinstance(value, Raw) else json.dumps(value)


def spec_text(
    name: str,
    model: object = "../models/digits.onnx",
    data: object = None,
    labels: object = None,
    runner: object = "local",
    timeout: object = Raw("60"),
    inputs: object = Raw("[1, 1, 8, 8]"),
    extends: object = None,
    extra: str = "",
    preprocess: bool = False,
) -> str:
    lines = ["apiVersion: npuctl/v1", "kind: Deployment"]
    if extends is not None:
        lines.append(f"extends: {_yaml(extends)}")
    lines += [f"metadata: {{name: {_yaml(name)}}}", "spec:", f"  model: {{path: {_yaml(model)}}}"]
    lines += ["  target: cpu", f"  inputs: {{image: {_yaml(inputs)}}}"]
    if preprocess:
        lines += ["  preprocess: {input: image, layout: nhwc, dtype: uint8, mean: [0.0], std: [255.0]}"]
    lines += ["  evaluate:", f"    runner: {_yaml(runner)}", "    warmup: 1", "    runs: 2"]
    lines.append(f"    timeout_s: {_yaml(timeout)}")
    if data is not None:
        lines.append(f"    data: {_yaml(data)}")
    if labels is not None:
        lines.append(f"    labels: {_yaml(labels)}")
    return "\n".join(lines) + "\n" + extra


Setup = Callable[[Ctx, str], None]
"""Writes the case's files; the second argument is the spec's file stem (h-<id>)."""


@dataclass(frozen=True)
class Case:
    id: str
    setup: Setup
    field: str
    """The field the error names ("" for whole-file and YAML-syntax problems)."""
    fragment: str
    """A piece of the one-line message."""
    phase: str = "spec"
    """spec | file | build | ok (see the module docstring)."""
    error_file: str | None = None
    """Where the error is located when not the case's own spec (a base file of `extends`)."""


def spec(**kw: object) -> Setup:
    """The case is one spec with these fields (the rest valid)."""

    def setup(ctx: Ctx, stem: str) -> None:
        ctx.write(f"specs/{stem}.yaml", spec_text(stem, **kw))  # type: ignore[arg-type]

    return setup


def _npy(array: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=True)
    return buf.getvalue()


def _npz(**arrays: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def _zip_bomb(megabytes: int) -> bytes:
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        header = b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }"
        header = header.ljust(127, b" ") + b"\n"
        with zf.open("image.npy", "w", force_zip64=True) as member:
            member.write(header.replace(b"%d", str(megabytes << 18).encode()))
            chunk = bytes(1 << 20)
            for _ in range(megabytes):
                member.write(chunk)
    return buf.getvalue()


def _png(width: int, height: int, body: bytes | None = None) -> bytes:
    """A grayscale PNG claiming `width` x `height`; `body` replaces its (compressed) pixel rows."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    rows = body if body is not None else zlib.compress(b"".join(b"\0" + bytes(width) for _ in range(height)))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


def _model_bytes(ctx: Ctx) -> bytes:
    return (ctx.repo / "models" / "digits.onnx").read_bytes()


def _external_model(ctx: Ctx, location: str) -> bytes:
    model = onnx.load_from_string(_model_bytes(ctx))
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    del tensor.float_data[:]
    tensor.data_location = onnx.TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", location
    return model.SerializeToString()


def _lying_initializer(ctx: Ctx) -> bytes:
    """An initializer claiming 2^40 elements with a few bytes of data (an allocation bomb)."""
    model = onnx.load_from_string(_model_bytes(ctx))
    tensor = model.graph.initializer[0]
    del tensor.dims[:]
    tensor.dims.extend([1 << 20, 1 << 20])
    return model.SerializeToString()


def _huge_attribute(ctx: Ctx) -> bytes:
    """A node carrying an unknown 4 MB string attribute: the checker refuses the graph."""
    model = onnx.load_from_string(_model_bytes(ctx))
    model.graph.node[0].attribute.append(onnx.helper.make_attribute("npuctl_junk", "x" * (4 << 20)))
    model.graph.node[0].op_type = "NoSuchOp"
    return model.SerializeToString()
