"""The TFLite toolchain: onnx2tf + LiteRT in a managed venv (`npuctl toolchain install tflite`).

Not a backend itself: the Arm Ethos-U (vela) and MediaTek (NeuroPilot) backends take TFLite, so their
quantize stage is this module's conversion (backends.tflite.stages.TfliteQuantize) and their host
measurements run the .tflite with LiteRT through benchprog in that venv (measured:host).

onnx2tf pins numpy 1.26.4 / onnx 1.19 / onnxruntime 1.23 / tensorflow 2.19, which conflict with the main
stack, so conversion runs in backends/tflite/worker.py under the venv's interpreter, by path and
isolated (backends.sdk.worker), with HOME and KERAS_HOME inside the job folder (Keras writes its config
there).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from backends.sdk import toolchains
from backends.sdk.errors import TerminalError, ToolchainMissing
from backends.sdk.worker import base_env, run_worker

WORKER = Path(__file__).with_name("worker.py")
OPERATORS = Path(__file__).with_name("operators.py")
TIMEOUT_S = 3600.0


def missing() -> str | None:
    if toolchains.python(toolchains.TFLITE) is None:
        return f"onnx2tf {toolchains.TFLITE.version} (tflite toolchain) not installed: {toolchains.TFLITE.install_hint}"
    return None


def venv_python() -> Path:
    py = toolchains.python(toolchains.TFLITE)
    if py is None:
        raise ToolchainMissing(missing() or "tflite toolchain not installed")
    return py


KEEP_FIELD = "quantization.sensitive_layers.keep"


def spec_errors(quantization: dict[str, Any], target: str) -> list[tuple[str, str]]:
    """(field, message) for what the TFLite path cannot build, found at `validate` rather than at
    apply: a model's own Q/DQ (onnx2tf converts float models, and TF's quantizer would round the
    tensors again with scales of its own), float layers inside a 16-bit-activation model (TF's
    selective quantizer keeps float layers in int8 models only), and the accuracy-driven layer search,
    which runs on ONNX Runtime's QDQ models only (here it would keep nothing, silently)."""
    if quantization.get("mode") == "qat":
        message = (
            f"qat is not built for {target}: onnx2tf converts float models only, and TF's quantizer would "
            "round the model's Q/DQ tensors again with scales of its own; give the float model with mode: ptq"
        )
        return [("quantization.mode", message)]
    rules = quantization.get("sensitive_layers")
    if quantization.get("mode") != "ptq" or not isinstance(rules, dict):
        return []
    errors = []
    if rules.get("auto"):
        errors.append(
            (
                "quantization.sensitive_layers.auto",
                f"the layer search is not built for {target} (it measures ONNX Runtime QDQ models, not "
                "TFLite); name the layers to keep with nodes, op_types, first or last",
            )
        )
    selects = any(rules.get(k) for k in ("nodes", "op_types", "first", "last"))
    keep = str(rules.get("keep") or "fp16")
    wide = quantization.get("activations") in ("int16", "uint16")
    if selects and keep in ("fp16", "fp32") and wide:
        errors.append(
            (
                KEEP_FIELD,
                f"keep: {keep} layers cannot be built for {target} with 16-bit activations: TF's selective "
                "quantizer keeps float layers in int8 models only; use activations: int8 or keep: int16",
            )
        )
    return errors


def fingerprint() -> dict[str, str]:
    parts = ("keep_locate.py", "names.py", "prepare.py")  # what the converted model depends on
    runners = WORKER.parents[1] / "runners"  # the check's outputs: the session benchprog runs too
    files = [
        WORKER,
        *(WORKER.with_name(n) for n in parts),
        runners / "bench_runtimes.py",
        runners / "bench_common.py",
    ]
    body = b"".join(f.read_bytes() for f in files)
    digest = hashlib.sha256(body).hexdigest()[:16]
    return {**toolchains.fingerprint(toolchains.TFLITE), "tflite_worker": digest}


def convert(request: dict[str, Any], job: Path, log: Path, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """Runs worker.py's conversion in `job`; returns its result (ok: true)."""
    from backends.tflite.failure import stopped_at

    env = base_env(job) | {"KERAS_HOME": str(job / ".keras"), "TF_CPP_MIN_LOG_LEVEL": "2"}
    start = log.stat().st_size if log.is_file() else 0
    try:
        return run_worker(
            venv_python(), WORKER, request, job, log, tool="onnx2tf", timeout_s=timeout_s, env=env
        )
    except TerminalError as exc:
        with log.open("rb") as fh:
            fh.seek(start)
            written = fh.read().decode(errors="replace")
        where = stopped_at(written, Path(request["model"]))
        if not where:
            raise
        first, _, rest = str(exc).partition("\n")
        raise TerminalError(
            f"onnx2tf stopped at {where}: {first.removeprefix('onnx2tf: ')}\n{rest}".rstrip()
        ) from exc


def operators(tflite: Path, job: Path, log: Path) -> list[dict[str, Any]]:
    """The .tflite's operators in execution order, read in the tflite venv with LiteRT's own flatbuffer
    schema (backends/tflite/operators.py): {"op", "outputs", "input_types"} each."""
    result = run_worker(
        venv_python(),
        OPERATORS,
        {"tflite": str(tflite)},
        job,
        log,
        tool="tflite",
        timeout_s=600.0,
        env=base_env(job),
    )
    return list(result["operators"])
