"""The rknn-toolkit2 worker: runs INSIDE the managed RKNN venv, as `python worker.py REQUEST.json RESULT.json`.

Standalone by design (standard library, numpy and rknn only): the venv has numpy 1.26 and onnx 1.18 and
no npuctl. The toolkit prints freely to stdout/stderr (the caller sends both to the stage log), so the
result goes to its own file. A failure the toolkit reports (a -1 return code) becomes
{"ok": false, "step": ..., "error": ...}; an abort (the toolkit kills the process, rc 134) leaves no
result file and the caller reports the log's last lines.

Request (paths relative to the request file's folder):
    {"format_version": 1,
     "model": "model.onnx", "inputs": ["x"], "input_shapes": [[1, 3, 48, 320]],
     "config": {...rknn.config keyword arguments...},
     "quantize": false, "dataset": "dataset.txt" | null,
     "hybrid": {"custom_hybrid": [["in", "out"], ...], "dtype": "float16"} | null,
     "tail_hybrid": {"custom_hybrid": [["in", "out"], ...], "nodes": [...]} | null  (kept beside
         `hybrid` when the toolkit knows every name; else built without it, and the result says why),
     "output": "model.rknn"}
and optionally rknn-after.json in the parent folder (read after the build; files the build does not read
stay out of its folder, since the toolkit's output bytes change with the folder's contents):
    {"simulate": {"samples": "samples.npz", "count": 4, "inputs": 1, "outputs": "outputs.npz"} | null,
     "analysis": {"inputs": ["sample0.npy"], "dir": "/tmp/...", "summary": "analysis.json"} | null}
Samples in samples.npz are keyed "s{i:06d}_{j}" (sample i, input j) in the ONNX model's layout (NCHW),
raw (the model's mean/std are applied by RKNN, exactly as on the device).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
AFTER_FILE = "rknn-after.json"
"""Actions run on the built model (simulate, analysis), read after the build; see run()."""


class WorkerError(Exception):
    def __init__(self, step: str, message: str) -> None:
        super().__init__(message)
        self.step = step


def _check(step: str, rc: Any) -> None:
    if rc != 0:
        raise WorkerError(step, f"rknn {step} returned {rc}")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _set_hybrid_dtype(cfg: Path, dtype: str) -> list[str]:
    """Rewrites the `custom_quantize_layers` block step 1 wrote (float16 by default) to `dtype`."""
    lines = cfg.read_text().splitlines()
    layers: list[str] = []
    out: list[str] = []
    inside = False
    for line in lines:
        if line.startswith("custom_quantize_layers:"):
            inside = True
            out.append(line)
            continue
        if inside and line.startswith("    ") and ":" in line:
            name = line.strip().rsplit(":", 1)[0]
            layers.append(name)
            out.append(f"    {name}: {dtype}")
            continue
        inside = False
        out.append(line)
    cfg.write_text("\n".join(out) + "\n")
    return layers


def _load(rknn: Any, req: dict[str, Any], base: Path) -> None:
    _check("config", rknn.config(**dict(req.get("config") or {})))
    _check(
        "load_onnx",
        rknn.load_onnx(
            model=str(base / req["model"]), inputs=req.get("inputs"), input_size_list=req.get("input_shapes")
        ),
    )


def _build(
    rknn: Any, req: dict[str, Any], base: Path, result: dict[str, Any], running: Callable[[str], None]
) -> Path:
    running("rknn-toolkit2's load_onnx")
    _load(rknn, req, base)
    dataset = str(base / req["dataset"]) if req.get("dataset") else None
    hybrid = dict(req.get("hybrid") or {})
    tail = req.get("tail_hybrid") if req.get("quantize") else None
    pairs = list(hybrid.get("custom_hybrid") or [])
    if tail or (req.get("quantize") and pairs):
        running("rknn-toolkit2's hybrid quantization (steps 1 and 2)")
    if tail:
        try:
            rknn = _hybrid(rknn, [*pairs, *tail["custom_hybrid"]], dataset, req, base, result)
            result["tail_hybrid"] = {"kept": True, "nodes": len(tail["nodes"])}
        except (ValueError, WorkerError) as exc:  # the toolkit renamed or folded an anchor tensor
            lines = [line for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
            result["tail_hybrid"] = {"kept": False, "why": lines[-1].strip()[:300]}  # the toolkit's own line
            rknn.release()
            rknn = _new_rknn()
            _load(rknn, req, base)
            tail = None
    if req.get("quantize") and pairs and not tail:
        rknn = _hybrid(rknn, pairs, dataset, req, base, result)
    elif not tail:
        kwargs: dict[str, Any] = {"do_quantization": bool(req.get("quantize")), "dataset": dataset}
        if req.get("auto_hybrid"):
            kwargs["auto_hybrid"] = True
        if req.get("rknn_batch_size"):
            kwargs["rknn_batch_size"] = int(req["rknn_batch_size"])
        running(f"rknn-toolkit2's build ({_build_kind(req)})")
        _check("build", rknn.build(**kwargs))
    out = base / req["output"]
    _check("export_rknn", rknn.export_rknn(str(out)))
    result["rknn"] = {"file": out.name, "sha256": _sha256(out), "size": out.stat().st_size}
    result["_rknn"] = rknn
    return out


def _hybrid(
    rknn: Any,
    pairs: list[list[str]],
    dataset: str | None,
    req: dict[str, Any],
    base: Path,
    result: dict[str, Any],
) -> Any:
    """Hybrid quantization with `pairs` kept at the request's dtype (float16 unless said): step 1 on the
    loaded model, the config's layers set to the dtype, step 2 on a fresh toolkit. Returns the toolkit
    holding the built model."""
    cwd = os.getcwd()
    os.chdir(base)  # step 1 writes <model>.model/.data/.quantization.cfg into the working folder
    try:
        _check(
            "hybrid_quantization_step1",
            rknn.hybrid_quantization_step1(dataset=dataset, proposal=False, custom_hybrid=pairs),
        )
    finally:
        os.chdir(cwd)
    stem = Path(req["model"]).stem
    cfg = base / f"{stem}.quantization.cfg"
    result["hybrid_layers"] = _set_hybrid_dtype(cfg, str((req.get("hybrid") or {}).get("dtype", "float16")))
    rknn.release()
    rknn = _new_rknn()
    _check(
        "hybrid_quantization_step2",
        rknn.hybrid_quantization_step2(
            model_input=str(base / f"{stem}.model"),
            data_input=str(base / f"{stem}.data"),
            model_quantization_cfg=str(cfg),
        ),
    )
    return rknn


def _new_rknn() -> Any:
    from rknn.api import RKNN

    return RKNN(verbose=True)  # the build's layer table (target, cycles per layer) is verbose output


def _simulate(rknn: Any, spec: dict[str, Any], base: Path) -> dict[str, Any]:
    import numpy as np

    _check("init_runtime", rknn.init_runtime(target=None))
    count = int(spec["count"])
    n_inputs = int(spec.get("inputs", 1))
    arrays: dict[str, Any] = {}
    with np.load(base / spec["samples"], allow_pickle=False) as archive:
        for i in range(count):
            feed = [archive[f"s{i:06d}_{j}"] for j in range(n_inputs)]
            # a layout only means something to a 4-D input, and the toolkit reads every entry as a
            # string (a None beside a token-id input crashed it in `.lower()`): nchw for all
            formats = ["nchw"] * len(feed)
            outs = rknn.inference(inputs=feed, data_format=formats)
            if outs is None:
                raise WorkerError("inference", f"rknn inference returned no outputs for sample {i}")
            for k, value in enumerate(outs):
                arrays[f"s{i:06d}_{k}"] = np.asarray(value, dtype=np.float32)
    with (base / spec["outputs"]).open("wb") as fh:
        np.savez(fh, **arrays)
    return {"samples": count, "outputs": spec["outputs"]}


_ROW = re.compile(
    r"^\s*\[(?P<op>[^\]]+)\]\s+(?P<name>\S+)\s+(?P<ec>[-\d.eE+]+)\s*\|\s*(?P<ee>[-\d.eE+]+)"
    r"\s+(?P<sc>[-\d.eE+]+)\s*\|\s*(?P<se>[-\d.eE+]+)"
)


def _analysis(rknn: Any, spec: dict[str, Any], base: Path) -> dict[str, Any]:
    """accuracy_analysis into a temporary folder; only the per-layer summary table is kept."""
    import shutil

    out_dir = Path(spec["dir"])
    inputs = [str(base / p) for p in spec["inputs"]]
    try:
        _check(
            "accuracy_analysis", rknn.accuracy_analysis(inputs=inputs, output_dir=str(out_dir), target=None)
        )
        text = (out_dir / "error_analysis.txt").read_text(errors="replace")
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    layers = []
    for line in text.splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        layers.append(
            {
                "op": m.group("op"),
                "name": m.group("name"),
                "entire_cos": float(m.group("ec")),
                "entire_euc": float(m.group("ee")),
                "single_cos": float(m.group("sc")),
                "single_euc": float(m.group("se")),
            }
        )
    worst = sorted(layers, key=lambda r: (r["single_cos"], r["name"]))[:10]
    final = layers[-1] if layers else None
    summary = {"layers": len(layers), "worst_single": worst, "output": final}
    (base / spec["summary"]).write_text(json.dumps(summary, indent=1, sort_keys=True))
    return {"summary": spec["summary"], "layers": len(layers)}


def _build_kind(req: dict[str, Any]) -> str:
    if req.get("quantize"):
        return f"quantizing to {(req.get('config') or {}).get('quantized_dtype')} on its calibration data"
    return "integer layers from the model's own Q/DQ scales" if req.get("own_qdq") else "float16"


def run(request_path: Path, running: Callable[[str], None] = lambda what: None) -> dict[str, Any]:
    """The build, then what the request's `after` file asks of it; `running` is told each step a crash
    may end, so that the parent can name it."""
    req = json.loads(request_path.read_text())
    if req.get("format_version") != FORMAT_VERSION:
        raise WorkerError(
            "request", f"format_version {req.get('format_version')!r}, expected {FORMAT_VERSION}"
        )
    base = request_path.resolve().parent
    rknn = _new_rknn()
    result: dict[str, Any] = {"format_version": FORMAT_VERSION, "ok": True}
    try:
        result["sdk"] = _version()
        _build(rknn, req, base, result, running)
        rknn = result.pop("_rknn")
        # Read only now: anything parsed before the build shifts the heap, and the toolkit's output
        # bytes depend on it, so evaluate's rebuild must read exactly what compile's build read.
        after_path = base.parent / AFTER_FILE
        after = json.loads(after_path.read_text()) if after_path.exists() else {}
        if after.get("simulate"):
            running("rknn-toolkit2's simulator (init_runtime and inference)")
            result["simulate"] = _simulate(rknn, after["simulate"], base)
        if after.get("analysis"):
            running("rknn-toolkit2's accuracy_analysis")
            result["analysis"] = _analysis(rknn, after["analysis"], base)
    finally:
        result.pop("_rknn", None)
        rknn.release()
    return result


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("rknn-toolkit2")
    except Exception:
        return "unknown"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: worker.py REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    request, result_path = Path(argv[0]), Path(argv[1])

    def running(what: str) -> None:
        result_path.write_text(json.dumps({"running": what}))

    try:
        result = run(request, running)
    except WorkerError as exc:
        result = {"format_version": FORMAT_VERSION, "ok": False, "step": exc.step, "error": str(exc)}
    except Exception as exc:
        traceback.print_exc()
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        result = {
            "format_version": FORMAT_VERSION,
            "ok": False,
            "step": "python",
            "error": f"{type(exc).__name__}: {first}",
        }
    Path(result_path).write_text(json.dumps(result, sort_keys=True))
    return 0 if result.get("ok") else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
