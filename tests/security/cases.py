"""The rows of the hostile-input corpus (tests/security/corpus.py says what a row means)."""

from __future__ import annotations

import numpy as np

from tests.security.corpus import (
    Case,
    Ctx,
    Raw,
    _external_model,
    _huge_attribute,
    _lying_initializer,
    _model_bytes,
    _npy,
    _npz,
    _png,
    _zip_bomb,
    spec,
    spec_text,
)

M = "spec.model.path"
E = "spec.evaluate.data"
L = "spec.evaluate.labels"
C = "spec.quantization.calibration.data"
R = "spec.evaluate.runner"
X = "extends"
OUT = "../../outside"
"""From specs/: the sandbox beside the repository."""


def _files(**files: object):  # type: ignore[no-untyped-def]
    """A case whose spec is `spec_text(**kw)` after writing files: {rel: bytes | ("link", target) | "fifo"}."""

    def make(rel_files: dict[str, object], kw: dict[str, object]):  # type: ignore[no-untyped-def]
        def setup(ctx: Ctx, stem: str) -> None:
            for rel, what in rel_files.items():
                rel = rel.replace("@", stem)
                if what == "fifo":
                    ctx.fifo(rel)
                elif what == "socket":
                    ctx.sock(rel)
                elif isinstance(what, tuple) and what[0] == "link":
                    target = what[1].replace("@out", str(ctx.outside)).replace("@", stem)
                    ctx.link(rel, target)
                elif isinstance(what, tuple) and what[0] == "hardlink":
                    (ctx.repo / rel).parent.mkdir(parents=True, exist_ok=True)
                    (ctx.repo / rel).hardlink_to(ctx.outside / what[1])
                elif callable(what):
                    ctx.write(rel, what(ctx))
                else:
                    ctx.write(rel, what)  # type: ignore[arg-type]
            values = {
                k: (v.replace("@", stem) if isinstance(v, str) and not isinstance(v, Raw) else v)
                for k, v in kw.items()
            }
            ctx.write(f"specs/{stem}.yaml", spec_text(stem, **values))  # type: ignore[arg-type]

        return setup

    def with_spec(**kw: object):  # type: ignore[no-untyped-def]
        return make(dict(files), kw)

    return with_spec


def _data(extra: dict[str, object], good: int = 2, **kw: object):  # type: ignore[no-untyped-def]
    """An evaluation folder with `good` real samples plus hostile members."""

    def setup(ctx: Ctx, stem: str) -> None:
        resolved = {}
        for name, what in extra.items():
            if isinstance(what, str) and what.startswith("@out"):
                resolved[name] = what.replace("@out", str(ctx.outside))
            elif callable(what):
                resolved[name] = what(ctx)
            else:
                resolved[name] = what
        rel = ctx.data(stem, resolved, good)  # type: ignore[arg-type]
        ctx.write(f"specs/{stem}.yaml", spec_text(stem, data=rel, **kw))  # type: ignore[arg-type]

    return setup


def _extends_files(files: dict[str, str | tuple[str, str]], extends: str):  # type: ignore[no-untyped-def]
    base = "apiVersion: npuctl/v1\nkind: DeploymentBase\n{extends}spec:\n  target: cpu\n"

    def setup(ctx: Ctx, stem: str) -> None:
        for rel, what in files.items():
            rel = rel.replace("@", stem)
            if isinstance(what, tuple):
                ctx.link(rel, what[1].replace("@out", str(ctx.outside)))
            else:
                ext = f"extends: {what.replace('@', stem)}\n" if what else ""
                ctx.write(rel, base.format(extends=ext))
        ctx.write(f"specs/{stem}.yaml", spec_text(stem, extends=extends.replace("@", stem)))

    return setup


def _base_only(base: str):  # type: ignore[no-untyped-def]
    """A child that sets only the target, over a base file holding everything else."""

    def setup(ctx: Ctx, stem: str) -> None:
        ctx.write(f"specs/bases/{stem}.yaml", base)
        head = _HEAD.replace("metadata", f"extends: bases/{stem}.yaml\nmetadata").replace("@", stem)
        ctx.write(f"specs/{stem}.yaml", head + "spec: {target: cpu}\n")

    return setup


def _raw_spec(text: bytes | str):  # type: ignore[no-untyped-def]
    def setup(ctx: Ctx, stem: str) -> None:
        body = text.replace("@", stem) if isinstance(text, str) else text.replace(b"@", stem.encode())
        ctx.write(f"specs/{stem}.yaml", body)

    return setup


def _spec_entry(kind: str, target: str):  # type: ignore[no-untyped-def]
    """specs/h-<id>.yaml itself is a symlink, FIFO or socket."""

    def setup(ctx: Ctx, stem: str) -> None:
        rel = f"specs/{stem}.yaml"
        if kind == "link":
            ctx.link(rel, target.replace("@out", str(ctx.outside)))
        elif kind == "fifo":
            ctx.fifo(rel)
        else:
            ctx.sock(rel)

    return setup


def _twins(ctx: Ctx, stem: str) -> None:
    ctx.write(f"specs/{stem}.yaml", spec_text("twin"))
    ctx.write(f"specs/{stem}-b.yaml", spec_text("twin"))


def _lock_target(kind: str):  # type: ignore[no-untyped-def]
    """A valid spec whose committed lock file is a symlink or hard link to a file outside."""

    def setup(ctx: Ctx, stem: str) -> None:
        ctx.write(f"specs/{stem}.yaml", spec_text(stem))
        lock = ctx.repo / "specs" / f"{stem}.lock.json"
        if kind == "symlink":
            lock.symlink_to(ctx.outside / "victim.json")
        else:
            lock.hardlink_to(ctx.outside / "victim-hard.json")

    return setup


_PICKLED = np.array([{"a": 1}], dtype=object)
_DEEP = "spec:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 80)) + "  " * 80 + "x: 1\n"
_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(8)
)
_HEAD = "apiVersion: npuctl/v1\nkind: Deployment\nmetadata: {name: @}\n"

CASES: list[Case] = [
    # --- model.path ------------------------------------------------------------------------------
    Case("m-abs-passwd", spec(model="/etc/passwd"), M, "absolute"),
    Case(
        "m-abs-outside",
        lambda ctx, stem: (
            ctx.write(f"specs/{stem}.yaml", spec_text(stem, model=str(ctx.outside / "secret.onnx"))) and None
        ),
        M,
        "absolute",
    ),
    Case("m-dotdot", spec(model=f"{OUT}/secret.onnx"), M, "outside the repository"),
    Case("m-tilde", spec(model="~/secret.onnx"), M, "absolute"),
    Case("m-nul", spec(model="../models/digits.onnx\0.txt"), M, "NUL byte"),
    Case("m-nul-only", spec(model="\0"), M, "NUL byte"),
    Case("m-empty", spec(model=""), M, ""),
    Case("m-blank", spec(model="   "), M, ""),
    Case("m-newline", spec(model="../models/digits.onnx\nx"), M, "not found"),
    Case("m-long", spec(model="a/" * 3000 + "m.onnx"), M, ""),
    Case("m-proc", spec(model="/proc/self/environ"), M, "absolute"),
    Case(
        "m-link-out",
        _files(**{"models/@.onnx": ("link", "@out/secret.onnx")})(model="../models/@.onnx"),
        M,
        "outside the repository",
    ),
    Case(
        "m-link-zero",
        _files(**{"models/@.onnx": ("link", "/dev/zero")})(model="../models/@.onnx"),
        M,
        "outside the repository",
    ),
    Case(
        "m-link-chain",
        _files(**{"models/@-1.onnx": ("link", "@-2.onnx"), "models/@-2.onnx": ("link", "@out/secret.onnx")})(
            model="../models/@-1.onnx"
        ),
        M,
        "outside the repository",
    ),
    Case(
        "m-link-loop",
        _files(**{"models/@-a.onnx": ("link", "@-b.onnx"), "models/@-b.onnx": ("link", "@-a.onnx")})(
            model="../models/@-a.onnx"
        ),
        M,
        "",
    ),
    Case(
        "m-link-dangling",
        _files(**{"models/@.onnx": ("link", "nowhere.onnx")})(model="../models/@.onnx"),
        M,
        "not found",
    ),
    Case(
        "m-link-dir-out",
        _files(**{"models/@": ("link", "@out")})(model="../models/@/secret.onnx"),
        M,
        "outside the repository",
    ),
    Case("m-fifo", _files(**{"models/@.onnx": "fifo"})(model="../models/@.onnx"), M, "FIFO"),
    Case("m-socket", _files(**{"models/@.onnx": "socket"})(model="../models/@.onnx"), M, "socket"),
    Case("m-dir", _files(**{"models/@.onnx/x": b"x"})(model="../models/@.onnx"), M, "folder"),
    Case("m-lookalike", spec(model="../models/d\u0456gits.onnx"), M, "not found"),
    Case("m-lookalike-nfd", spec(model="../models/digits\u0301.onnx"), M, "not found"),
    Case(
        "m-garbage",
        _files(**{"models/@.onnx": b"\x08\x07garbage\xff" * 100})(model="../models/@.onnx"),
        M,
        "",
    ),
    Case("m-empty-file", _files(**{"models/@.onnx": b""})(model="../models/@.onnx"), M, ""),
    Case(
        "m-truncated",
        _files(**{"models/@.onnx": lambda c: _model_bytes(c)[:4000]})(model="../models/@.onnx"),
        M,
        "",
    ),
    Case(
        "m-text", _files(**{"models/@.onnx": b"<html>not a model</html>\n"})(model="../models/@.onnx"), M, ""
    ),
    Case(
        "m-external-out",
        _files(**{"models/@.onnx": lambda c: _external_model(c, "../../outside/weights.bin")})(
            model="../models/@.onnx"
        ),
        "",
        "external data",
        "build",
    ),
    Case(
        "m-external-abs",
        _files(**{"models/@.onnx": lambda c: _external_model(c, "/etc/passwd")})(model="../models/@.onnx"),
        "",
        "external data",
        "build",
    ),
    Case(
        "m-lying-tensor",
        _files(**{"models/@.onnx": _lying_initializer})(model="../models/@.onnx"),
        "",
        "",
        "build",
    ),
    Case(
        "m-huge-attribute",
        _files(**{"models/@.onnx": _huge_attribute})(model="../models/@.onnx"),
        "",
        "NoSuchOp",
        "build",
    ),
    Case(
        "m-pin",
        _raw_spec(
            _HEAD
            + "spec:\n  model: {path: ../models/digits.onnx, sha256: '"
            + "0" * 64
            + "'}\n  target: cpu\n  inputs: {image: [1, 1, 8, 8]}\n"
        ),
        "spec.model.sha256",
        "pin does not match",
    ),
    Case(
        "m-package-escape",
        _raw_spec(
            _HEAD
            + "spec:\n  model: {package: onnx, path: ../../../../etc/passwd}\n  target: cpu\n  inputs: {image: [1, 1, 8, 8]}\n"
        ),
        M,
        "outside the package folder",
    ),
    Case(
        "m-package-missing",
        _raw_spec(
            _HEAD
            + "spec:\n  model: {package: no_such_package_zz, path: m.onnx}\n  target: cpu\n  inputs: {image: [1, 1, 8, 8]}\n"
        ),
        "spec.model.package",
        "not installed",
    ),
    Case(
        "m-package-nul",
        _raw_spec(
            _HEAD
            + 'spec:\n  model: {package: "onnx\\0", path: m.onnx}\n  target: cpu\n  inputs: {image: [1, 1, 8, 8]}\n'
        ),
        "spec.model.package",
        "",
    ),
    # --- extends ---------------------------------------------------------------------------------
    Case("x-abs", spec(extends="/etc/passwd"), X, "absolute"),
    Case("x-dotdot", spec(extends=f"{OUT}/base.yaml"), X, "outside the repository"),
    Case("x-nul", spec(extends="base\0.yaml"), X, "NUL byte"),
    Case("x-tilde", spec(extends="~/base.yaml"), X, "absolute"),
    Case(
        "x-self",
        _raw_spec(_HEAD.replace("metadata", "extends: @.yaml\nmetadata") + "spec: {target: cpu}\n"),
        X,
        "cycle",
    ),
    Case(
        "x-cycle",
        _extends_files(
            {"specs/bases/@-a.yaml": "@-b.yaml", "specs/bases/@-b.yaml": "@-a.yaml"}, "bases/@-a.yaml"
        ),
        X,
        "cycle",
        error_file="bases/h-x-cycle-b.yaml",
    ),
    Case(
        "x-deep",
        _extends_files(
            {f"specs/bases/@-{i}.yaml": (f"@-{i + 1}.yaml" if i < 20 else "") for i in range(21)},
            "bases/@-0.yaml",
        ),
        X,
        "levels of extends",
        error_file="bases/h-x-deep-16.yaml",
    ),
    Case(
        "x-link-out",
        _extends_files({"specs/bases/@.yaml": ("link", "@out/base.yaml")}, "bases/@.yaml"),
        X,
        "outside the repository",
    ),
    Case(
        "x-link-zero",
        _extends_files({"specs/bases/@.yaml": ("link", "/dev/zero")}, "bases/@.yaml"),
        X,
        "outside the repository",
    ),
    Case("x-fifo", _files(**{"specs/bases/@.yaml": "fifo"})(extends="bases/@.yaml"), X, "FIFO"),
    Case("x-dir", _files(**{"specs/bases/@.yaml/x": b"x"})(extends="bases/@.yaml"), X, "folder"),
    Case("x-missing", spec(extends="bases/nothere.yaml"), X, "not found"),
    Case("x-number", spec(extends=Raw("5")), X, "must be a file name"),
    Case(
        "x-binary",
        _files(**{"specs/bases/@.yaml": b"\xff\xfe\x00garbage"})(extends="bases/@.yaml"),
        "",
        "not UTF-8",
        error_file="bases/h-x-binary.yaml",
    ),
    Case(
        "x-wrong-kind",
        _files(**{"specs/bases/@.yaml": "apiVersion: npuctl/v1\nkind: Secret\n"})(extends="bases/@.yaml"),
        "kind",
        "a base must set kind",
        error_file="bases/h-x-wrong-kind.yaml",
    ),
    Case(
        "x-base-escapes",
        _base_only(
            "apiVersion: npuctl/v1\nkind: DeploymentBase\nspec:\n  model: {path: ../../../outside/secret.onnx}\n"
            "  inputs: {image: [1, 1, 8, 8]}\n"
        ),
        M,
        "outside the repository",
        error_file="bases/h-x-base-escapes.yaml",
    ),
    Case(
        "x-base-huge",
        _files(**{"specs/bases/@.yaml": "a: " + "x" * (1 << 21) + "\n"})(extends="bases/@.yaml"),
        "",
        "bytes",
        "file",
        error_file="bases/h-x-base-huge.yaml",
    ),
    Case(
        "x-base-tag",
        _files(
            **{
                "specs/bases/@.yaml": "apiVersion: npuctl/v1\nkind: DeploymentBase\nspec: !!python/object/apply:os.system ['touch /tmp/npuctl-pwned']\n"
            }
        )(extends="bases/@.yaml"),
        "",
        "",
        error_file="bases/h-x-base-tag.yaml",
    ),
    # --- data folders, labels, calibration -------------------------------------------------------
    Case("d-abs", spec(data="/etc"), E, "absolute"),
    Case("d-dotdot", spec(data=OUT), E, "outside the repository"),
    Case("d-nul", spec(data="../data/eval\0"), E, "NUL byte"),
    Case(
        "d-link-out",
        _files(**{"hostile/@": ("link", "@out")})(data="../hostile/@"),
        E,
        "outside the repository",
    ),
    Case("d-link-loop", _files(**{"hostile/@": ("link", "@")})(data="../hostile/@"), E, ""),
    Case("d-member-link-out", _data({"evil.npy": "@out/secret.npy"}), E, "outside the repository"),
    Case("d-member-link-passwd", _data({"evil.npy": "/etc/passwd"}), E, "outside the repository"),
    Case("d-member-link-zero", _data({"zero.npy": "/dev/zero"}), E, "outside the repository"),
    Case("d-member-link-urandom", _data({"rand.png": "/dev/urandom"}), E, "outside the repository"),
    Case("d-member-fifo", _data({"pipe.npy": "fifo"}), E, "FIFO"),
    Case("d-member-socket", _data({"sock.npz": "socket"}), E, "socket"),
    Case("d-member-link-loop", _data({"loop.npy": "loop.npy"}), E, ""),
    Case("d-member-link-out-fifo", _data({"pipe.npy": "@out/pipe"}), E, "outside the repository"),
    Case(
        "d-member-hardlink",
        lambda ctx, stem: (
            (
                ctx.data(stem),
                (ctx.repo / "hostile" / stem / "x.npy").hardlink_to(ctx.outside / "secret.npy"),
                ctx.write(f"specs/{stem}.yaml", spec_text(stem, data=f"../hostile/{stem}")),
            )[-1]
            and None
        ),
        "",
        "",
        "ok",
    ),
    Case("l-abs", spec(labels="/etc/passwd"), L, "absolute"),
    Case("l-dotdot", spec(labels=f"{OUT}/labels.txt"), L, "outside the repository"),
    Case("l-nul", spec(labels="labels\0.txt"), L, "NUL byte"),
    Case(
        "l-link-out",
        _files(**{"hostile/@-labels.txt": ("link", "@out/labels.txt")})(labels="../hostile/@-labels.txt"),
        L,
        "outside the repository",
    ),
    Case(
        "l-link-zero",
        _files(**{"hostile/@-labels.txt": ("link", "/dev/zero")})(labels="../hostile/@-labels.txt"),
        L,
        "outside the repository",
    ),
    Case(
        "l-fifo",
        _files(**{"hostile/@-labels.txt": "fifo"})(data="../data/eval", labels="../hostile/@-labels.txt"),
        L,
        "FIFO",
    ),
    Case("l-dir", _files(**{"hostile/@-labels.txt/x": b"x"})(labels="../hostile/@-labels.txt"), L, "folder"),
    Case(
        "l-binary",
        _files(
            **{
                "hostile/@/a.npy": lambda c: (
                    (c.repo / "data/eval")
                    .joinpath(sorted(p.name for p in (c.repo / "data/eval").glob("*.npy"))[0])
                    .read_bytes()
                ),
                "hostile/@-labels.txt": b"\xff\xfe\x00\x01",
            }
        )(data="../hostile/@", labels="../hostile/@-labels.txt"),
        "",
        "labels",
        "build",
    ),
    Case(
        "l-malformed",
        _files(
            **{
                "hostile/@/a.npy": lambda c: sorted((c.repo / "data/eval").glob("*.npy"))[0].read_bytes(),
                "hostile/@-labels.txt": b"a.npy one two three\n",
            }
        )(data="../hostile/@", labels="../hostile/@-labels.txt"),
        "",
        "labels",
        "build",
    ),
    Case(
        "c-dotdot",
        _raw_spec(
            _HEAD
            + "spec:\n  model: {path: ../models/digits.onnx}\n  target: cpu\n  inputs: {image: [1, 1, 8, 8]}\n  quantization: {mode: ptq, calibration: {data: ../../outside, samples: 2}}\n"
        ),
        C,
        "outside the repository",
    ),
    Case(
        "c-nul",
        _raw_spec(
            _HEAD
            + 'spec:\n  model: {path: ../models/digits.onnx}\n  target: cpu\n  inputs: {image: [1, 1, 8, 8]}\n  quantization: {mode: ptq, calibration: {data: "../data/calib\\0", samples: 2}}\n'
        ),
        C,
        "NUL byte",
    ),
    Case(
        "c-member-fifo",
        lambda ctx, stem: (
            (
                ctx.fifo(f"hostile/{stem}/p.npy"),
                ctx.write(
                    f"specs/{stem}.yaml",
                    _HEAD.replace("@", stem)
                    + f"spec:\n  model: {{path: ../models/digits.onnx}}\n  target: cpu\n  inputs: {{image: [1, 1, 8, 8]}}\n  quantization: {{mode: ptq, calibration: {{data: ../hostile/{stem}, samples: 1}}}}\n",
                ),
            )[-1]
            and None
        ),
        C,
        "FIFO",
    ),
    # --- input-file contents: terminal, located by field and file, never retried -----------------
    Case("f-pickled-npy", _data({"evil.npy": _npy(_PICKLED)}), "", "evil.npy", "build"),
    Case("f-pickled-npz", _data({"evil.npz": _npz(image=_PICKLED)}), "", "evil.npz", "build"),
    Case("f-zip-bomb", _data({"bomb.npz": _zip_bomb(64)}), "", "bomb.npz", "build"),
    Case(
        "f-npz-keys",
        _data({"keys.npz": _npz(other=np.zeros((1, 1, 8, 8), np.float32))}),
        "",
        "keys.npz",
        "build",
    ),
    Case("f-npz-garbage", _data({"junk.npz": b"PK\x03\x04" + b"\x00" * 100}), "", "junk.npz", "build"),
    Case("f-npy-garbage", _data({"junk.npy": b"\x93NUMPY" + b"\xff" * 50}), "", "junk.npy", "build"),
    Case(
        "f-npy-truncated",
        _data({"trunc.npy": _npy(np.zeros((1, 1, 8, 8), np.float32))[:100]}),
        "",
        "trunc.npy",
        "build",
    ),
    Case(
        "f-npy-huge-header",
        _data(
            {
                "huge.npy": b"\x93NUMPY\x01\x00v\x00"
                + b"{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }".ljust(117)
                + b"\n"
            }
        ),
        "",
        "huge.npy",
        "build",
    ),
    Case(
        "f-npy-oversized", _data({"big.npy": _npy(np.zeros((1 << 20,), np.float32))}), "", "big.npy", "build"
    ),
    Case(
        "f-npy-complex",
        _data({"cplx.npy": _npy(np.zeros((1, 1, 8, 8), np.complex64))}),
        "",
        "cplx.npy",
        "build",
    ),
    Case("f-npy-shape", _data({"shape.npy": _npy(np.zeros((3, 3), np.float32))}), "", "shape.npy", "build"),
    Case("f-npy-empty", _data({"empty.npy": b""}), "", "empty.npy", "build"),
    Case(
        "f-png-bomb",
        _data(
            {"bomb.png": _png(60000, 60000, b"x\x9c" + b"\x00" * 64)},
            good=0,
            preprocess=True,
        ),
        "",
        "bomb.png",
        "build",
    ),
    Case(
        "f-png-garbage",
        _data(
            {"junk.png": b"\x89PNG\r\n\x1a\n" + b"\x00" * 40},
            good=0,
            preprocess=True,
        ),
        "",
        "junk.png",
        "build",
    ),
    Case(
        "f-png-size",
        _data({"wide.png": _png(16, 8)}, good=0, preprocess=True),
        "",
        "wide.png",
        "build",
    ),
    Case(
        "f-png-truncated",
        _data({"cut.png": _png(8, 8)[:40]}, good=0, preprocess=True),
        "",
        "cut.png",
        "build",
    ),
    Case("f-png-to-float", _data({"img.png": _png(8, 8)}, good=0), "", "img.png", "build"),
    # --- the spec file itself --------------------------------------------------------------------
    Case(
        "s-not-utf8",
        _raw_spec(b"apiVersion: npuctl/v1\nkind: Deployment\nmetadata: {name: \xff\xfe}\n"),
        "",
        "not UTF-8",
    ),
    Case("s-alias-bomb", _raw_spec(_HEAD + _LAUGHS), "", "alias"),
    Case("s-deep", _raw_spec(_HEAD + _DEEP), "", "nesting"),
    Case("s-huge", _raw_spec("# " + "x" * (1 << 21) + "\n"), "", "bytes", "file"),
    Case(
        "s-python-tag",
        _raw_spec(_HEAD + "spec: !!python/object/apply:os.system ['touch /tmp/npuctl-pwned']\n"),
        "",
        "",
    ),
    Case("s-binary", _raw_spec(b"\x00\x01\x02\x03\xff" * 50), "", ""),
    Case("s-empty", _raw_spec(""), "", "empty", "file"),
    Case("s-list", _raw_spec("- apiVersion: npuctl/v1\n- kind: Deployment\n"), "", "mapping"),
    Case("s-tabs", _raw_spec(_HEAD + "spec:\n\tmodel: x\n"), "", "invalid YAML"),
    Case("s-dup-key", _raw_spec(_HEAD + "spec:\n  target: cpu\n  target: rk3588\n"), "spec.target", ""),
    Case(
        "s-unknown-key",
        _raw_spec(
            _HEAD
            + "spec:\n  modle: {path: ../models/digits.onnx}\n  target: cpu\n  inputs: {image: [1, 1, 8, 8]}\n"
        ),
        "spec.modle",
        "",
    ),
    Case("s-link-passwd", _spec_entry("link", "/etc/passwd"), "", "outside the repository", "file"),
    Case("s-link-out", _spec_entry("link", "@out/secret.yaml"), "", "outside the repository", "file"),
    Case("s-link-zero", _spec_entry("link", "/dev/zero"), "", "outside the repository", "file"),
    Case("s-fifo", _spec_entry("fifo", ""), "", "FIFO", "file"),
    Case("s-socket", _spec_entry("socket", ""), "", "socket", "file"),
    Case("s-twin-name", _twins, "metadata.name", "also claimed by"),
    Case(
        "s-name-traversal",
        _raw_spec(
            "apiVersion: npuctl/v1\nkind: Deployment\nmetadata: {name: ../../etc}\nspec: {model: {path: ../models/digits.onnx}, target: cpu, inputs: {image: [1, 1, 8, 8]}}\n"
        ),
        "metadata.name",
        "",
    ),
    Case(
        "s-name-nul",
        _raw_spec(
            'apiVersion: npuctl/v1\nkind: Deployment\nmetadata: {name: "a\\0b"}\nspec: {model: {path: ../models/digits.onnx}, target: cpu, inputs: {image: [1, 1, 8, 8]}}\n'
        ),
        "metadata.name",
        "",
    ),
    # --- bounds ----------------------------------------------------------------------------------
    Case("b-elements", spec(inputs=Raw("[1000000000, 1, 8, 8]")), "spec.inputs.image", "elements"),
    Case(
        "b-elements-variant",
        _raw_spec(
            _HEAD
            + "spec:\n  model: {path: ../models/digits.onnx}\n  target: cpu\n  inputs: {image: [1, 1, 8, 8]}\n  shape_variants: [{image: [65536, 65536, 1, 1]}]\n"
        ),
        "spec.shape_variants",
        "elements",
    ),
    Case("b-rank", spec(inputs=Raw("[1, 1, 1, 1, 1, 1, 1, 1, 1]")), "spec.inputs.image", ""),
    Case("b-negative", spec(inputs=Raw("[1, -1, 8, 8]")), "spec.inputs.image", ""),
    Case("b-timeout-inf", spec(timeout=Raw(".inf")), "spec.evaluate.timeout_s", ""),
    Case("b-timeout-nan", spec(timeout=Raw(".nan")), "spec.evaluate.timeout_s", ""),
    Case("b-timeout-huge", spec(timeout=Raw("1e12")), "spec.evaluate.timeout_s", ""),
    Case(
        "b-runs",
        _raw_spec(
            _HEAD
            + "spec:\n  model: {path: ../models/digits.onnx}\n  target: cpu\n  inputs: {image: [1, 1, 8, 8]}\n  evaluate: {runs: 1000000000}\n"
        ),
        "spec.evaluate.runs",
        "",
    ),
    Case(
        "b-variants",
        _raw_spec(
            _HEAD
            + "spec:\n  model: {path: ../models/digits.onnx}\n  target: cpu\n  inputs: {image: [1, 1, 8, 8]}\n  shape_variants: ["
            + ", ".join(["{image: [1, 1, 8, 8]}"] * 100)
            + "]\n"
        ),
        "spec.shape_variants",
        "",
    ),
    # --- runner URLs -----------------------------------------------------------------------------
    Case("r-ssh-option-user", spec(runner="ssh://-Fx@y"), R, ""),
    Case("r-ssh-option-host", spec(runner="ssh://pi@-oProxyCommand=touch"), R, ""),
    Case("r-ssh-port-zero", spec(runner="ssh://pi@board:0"), R, "port"),
    Case("r-ssh-port-big", spec(runner="ssh://pi@board:99999"), R, ""),
    Case("r-ssh-path", spec(runner="ssh://pi@board/etc"), R, ""),
    Case("r-ssh-space", spec(runner="ssh://p i@board"), R, ""),
    Case("r-ssh-semicolon", spec(runner="ssh://pi@board;touch"), R, ""),
    Case("r-ssh-no-user", spec(runner="ssh://board"), R, ""),
    Case("r-adb-option", spec(runner="adb://-s"), R, ""),
    Case("r-adb-shell", spec(runner="adb://x$(id)"), R, ""),
    Case("r-local-shell", spec(runner="local; rm -rf /"), R, ""),
    Case("r-file-url", spec(runner="file:///etc/passwd"), R, ""),
    # --- lock files that point outside -----------------------------------------------------------
    Case("k-lock-symlink", _lock_target("symlink"), "", "", "ok"),
    Case("k-lock-hardlink", _lock_target("hardlink"), "", "", "ok"),
]
