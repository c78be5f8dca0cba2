"""The one place onnxruntime-qnn is loaded: `python -I -m backends.qnn.worker REQUEST.json`.

Run as a child (backends.qnn.driver): the QNN HTP library can abort the process, and its validation
and placement lines go to the native stderr, which the parent captures to a file and parses
(backends.qnn.validation). Prints one JSON object on stdout.

Request: {"mode": "validate" | "compile" | "run", "model": PATH, "htp_arch": "75", "soc_model": "57",
          "context_model": PATH (compile), "samples": NPZ, "count": N, "inputs": [names],
          "outputs": NPZ, "profile": CSV (run)}
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _session(model: str, request: dict[str, Any], config: dict[str, str], extra: dict[str, str]) -> Any:
    import onnxruntime as ort
    import onnxruntime_qnn as qnn

    ort.register_execution_provider_library(qnn.get_ep_name(), qnn.get_library_path())
    devices = [d for d in ort.get_ep_devices() if d.ep_name == qnn.get_ep_name()]
    if not devices:
        raise RuntimeError("onnxruntime-qnn registered no device")
    options = ort.SessionOptions()
    # verbose for validate and compile: the log names each node QNN refuses (the check's placement,
    # a failed compile's stopping point)
    options.log_severity_level = 2 if request["mode"] == "run" else 0
    if request["mode"] == "validate":
        # node names in the log must be the ONNX model's own: no fusion before partitioning
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for key, value in config.items():
        options.add_session_config_entry(key, value)
    provider = {
        "backend_path": qnn.get_qnn_htp_path(),
        "htp_arch": str(request["htp_arch"]),
        "soc_model": str(request["soc_model"]),
        "enable_htp_fp16_precision": "1",
        **extra,
    }
    options.add_provider_for_devices(devices, provider)
    return ort.InferenceSession(model, options)


def validate(request: dict[str, Any]) -> dict[str, Any]:
    session = _session(request["model"], request, {}, {})
    return {"providers": session.get_providers()}


def compile_context(request: dict[str, Any]) -> dict[str, Any]:
    config = {
        "ep.context_enable": "1",
        "ep.context_file_path": request["context_model"],
        "ep.context_embed_mode": "0",
    }
    _session(request["model"], request, config, {})
    return {"context_model": request["context_model"]}


def run(request: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    extra = {"profiling_level": "detailed", "profiling_file_path": request["profile"]}
    session = _session(request["model"], request, {}, extra)
    names = [o.name for o in session.get_outputs()]
    arrays: dict[str, Any] = {}
    with np.load(request["samples"]) as samples:
        for i in range(int(request["count"])):
            feed = {name: samples[f"s{i:06d}_{j}"] for j, name in enumerate(request["inputs"])}
            for k, value in enumerate(session.run(None, feed)):
                arrays[f"s{i:06d}_{k}"] = value
    with open(request["outputs"], "wb") as fh:
        np.savez(fh, **arrays)
    del session  # the profile is written when the session ends
    return {"outputs": names}


MODES = {"validate": validate, "compile": compile_context, "run": run}


def main(argv: list[str]) -> int:
    from importlib.metadata import version

    request = json.loads(Path(argv[0]).read_text())
    try:
        result = MODES[request["mode"]](request)
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        text = str(exc).strip().splitlines()
        print(json.dumps({"ok": False, "error": (text[0] if text else type(exc).__name__)[:400]}))
        return 2
    result.update(ok=True, onnxruntime_qnn=version("onnxruntime-qnn"), onnxruntime=version("onnxruntime"))
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
