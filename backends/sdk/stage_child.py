"""A stage implementation run in the child interpreter of backends.sdk.child_call: the request and the
output cross the process boundary as JSON (files stay where they are, named by path).

The implementation object itself goes over pickled (some carry constructor arguments: the SDK a bundle
backend found, its artifact names). Pickle is safe here because only this parent writes what this
child reads, over their private pipe; nothing from a repository is ever unpickled. An implementation
that does not pickle by reference (a class made at run time) or that the child cannot import (a module
only the parent's import path has) runs in the engine's own process, and the log says so.
"""

from __future__ import annotations

import base64
import pickle
from dataclasses import asdict
from pathlib import Path
from typing import Any

from backends.catalog import Target
from backends.sdk.base import StageImpl, StageOutput, StageRequest


def impl_ref(impl: StageImpl) -> str:
    cls = type(impl)
    return f"{cls.__module__}:{cls.__qualname__}"


def _pickled(impl: StageImpl) -> str:
    return base64.b64encode(pickle.dumps(impl, protocol=pickle.HIGHEST_PROTOCOL)).decode()


def in_process_reason(impl: StageImpl) -> str | None:
    """Why `impl` cannot run in a child, or None when it can be sent there."""
    try:
        _pickled(impl)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        return f"{impl_ref(impl)} cannot be sent to a child ({type(exc).__name__}: {exc})"
    return None


def toolchain_name(impl: StageImpl) -> str:
    """Who runs in the child, for messages: the backend package ("onnxruntime", "openvino") or the
    top-level module of a third-party implementation."""
    parts = type(impl).__module__.split(".")
    if parts[0] == "backends" and len(parts) > 1:
        return "onnx (shared passes)" if parts[1] == "onnx" else parts[1]
    return parts[0]


def request_json(impl: StageImpl, request: StageRequest) -> dict[str, Any]:
    return {
        "impl": impl_ref(impl),
        "impl_pickle": _pickled(impl),
        "stage": request.stage,
        "target": asdict(request.target),
        "config": dict(request.config),
        "inputs": {name: str(path) for name, path in request.inputs.items()},
        "workdir": str(request.workdir),
        "log": str(request.log),
    }


def output_from_json(data: dict[str, Any]) -> StageOutput:
    return StageOutput(
        artifacts={name: Path(path) for name, path in data["artifacts"].items()},
        report=data["report"],
        note=data["note"],
    )


def run_stage(data: dict[str, Any]) -> dict[str, Any]:
    """The child's side: constructs the implementation and runs the request."""
    from backends.sdk.child_call import Unloadable

    try:
        impl = pickle.loads(base64.b64decode(data["impl_pickle"]))  # from our parent only, see above
    except (ImportError, AttributeError) as exc:
        raise Unloadable(f"{data['impl']}: {exc}") from exc
    target = dict(data["target"])
    target["precisions"] = tuple(target["precisions"])
    request = StageRequest(
        stage=data["stage"],
        target=Target(**target),
        config=data["config"],
        inputs={name: Path(path) for name, path in data["inputs"].items()},
        workdir=Path(data["workdir"]),
        log=Path(data["log"]),
    )
    output: StageOutput = impl.run(request)
    return {
        "artifacts": {name: str(path) for name, path in output.artifacts.items()},
        "report": output.report,
        "note": output.note,
    }
