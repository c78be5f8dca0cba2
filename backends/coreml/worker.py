"""Runs inside the managed coreml venv: `python -I worker.py REQUEST.json RESULT.json`.

Standalone (standard library, numpy, onnx, onnx2torch, torch, coremltools). ONNX -> onnx2torch ->
torch.jit.trace -> coremltools ML Program (.mlpackage), optionally with int8 weights
(linear_quantize_weights). Also writes the traced PyTorch model's outputs on the given input, so the
parent can check the conversion against ONNX Runtime (Core ML itself cannot run on Linux).
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any


def _without_torchvision() -> None:
    """onnx2torch imports torchvision for its NonMaxSuppression/RoiAlign converters only, and PyPI's
    torchvision breaks beside the CPU torch build. A named stand-in module lets it import; a model that
    really uses those ops fails with this message instead of converting wrongly."""
    import importlib.util
    import types

    if importlib.util.find_spec("torchvision") is not None:
        return

    def missing(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("NonMaxSuppression/RoiAlign need torchvision, not installed beside CPU torch")

    stub = types.ModuleType("torchvision")
    ops = types.ModuleType("torchvision.ops")
    ops.nms = ops.box_convert = ops.roi_align = missing  # type: ignore[attr-defined]
    stub.ops = ops  # type: ignore[attr-defined]
    stub.__doc__ = "npuctl stand-in: torchvision is not installed"
    sys.modules["torchvision"], sys.modules["torchvision.ops"] = stub, ops


def _sibling(name: str) -> Any:
    """A module beside this file, by path (the worker runs isolated: its folder is not on sys.path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        f"npuctl_coreml_{name}", Path(__file__).with_name(f"{name}.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _outputs_through_identity(model: Any) -> None:
    """A graph output written by a node with several outputs (an LSTM's last state, a Split's part) is
    passed through an Identity: onnx2torch returns such a node's whole tuple as the graph output."""
    from onnx import helper

    outputs = {o.name for o in model.graph.output}
    added = []
    for node in model.graph.node:
        if len([t for t in node.output if t]) < 2:
            continue
        for k, name in enumerate(node.output):
            if name in outputs:
                inner = f"{name}/npuctl_before_identity"
                node.output[k] = inner
                for other in model.graph.node:
                    other.input[:] = [inner if t == name else t for t in other.input]
                added.append(helper.make_node("Identity", [inner], [name], name=f"{name}/npuctl_identity"))
    model.graph.node.extend(added)


def _traced_type(array: Any) -> Any:
    """A sample array as the traced module takes it: floats as float32, integers as int64, booleans as
    booleans."""
    import numpy as np

    if array.dtype == np.bool_:
        return array
    if np.issubdtype(array.dtype, np.integer):
        return array.astype(np.int64)
    return array.astype(np.float32)


def _coreml_type(dtype: Any) -> Any:
    """The Core ML input type of a traced input: int32 for integers (Core ML has no int64 input)."""
    import numpy as np

    if dtype == np.bool_:
        return np.bool_
    return np.int32 if np.issubdtype(dtype, np.integer) else np.float32


def convert(request: dict[str, Any]) -> dict[str, Any]:
    _without_torchvision()
    import coremltools as ct
    import numpy as np
    import onnx
    import torch
    from onnx2torch import convert as to_torch

    _sibling("lstm")  # registers onnx2torch's missing LSTM converter
    torch.manual_seed(0)
    model = onnx.load(request["model"])
    _outputs_through_identity(model)
    module = to_torch(model).eval()
    with np.load(request["sample"]) as sample:
        arrays = [_traced_type(np.asarray(sample[f"i{k}"])) for k in range(len(request["inputs"]))]
    feed = [torch.from_numpy(a) for a in arrays]
    with torch.no_grad():
        traced = torch.jit.trace(module, tuple(feed))
        outs = traced(*feed)
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    np.savez(request["torch_outputs"], **{f"o{k}": o.detach().numpy() for k, o in enumerate(outs)})
    # every input in its own type: token ids stay integers (a Gather refuses float indices), a
    # boolean mask stays boolean; Core ML takes them as int32 and bool tensors
    inputs = [
        ct.TensorType(name=spec["name"], shape=tuple(spec["shape"]), dtype=_coreml_type(a.dtype))
        for spec, a in zip(request["inputs"], arrays, strict=True)
    ]
    outputs = [ct.TensorType(name=name) for name in request["outputs"]]
    mlmodel = ct.convert(
        traced,
        inputs=inputs,
        outputs=outputs,
        convert_to="mlprogram",
        compute_units=getattr(ct.ComputeUnit, request["compute_units"]),
        compute_precision=getattr(ct.precision, request["compute_precision"]),
        minimum_deployment_target=getattr(ct.target, request["deployment_target"]),
    )
    if request.get("weights") == "int8":
        from coremltools.optimize.coreml import (
            OpLinearQuantizerConfig,
            OptimizationConfig,
            linear_quantize_weights,
        )

        config = OptimizationConfig(
            global_config=OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8")
        )
        mlmodel = linear_quantize_weights(mlmodel, config)
    mlmodel.short_description = request.get("description", "")
    mlmodel.save(request["output"])
    spec = mlmodel.get_spec()
    return {
        "coremltools": ct.__version__,
        "torch": torch.__version__,
        "spec_version": int(spec.specificationVersion),
        "inputs": [i.name for i in spec.description.input],
        "outputs": [o.name for o in spec.description.output],
        "program_ops": program_ops(spec),
        "package_inputs": [feature(i) for i in spec.description.input],
    }


def program_ops(spec: Any) -> dict[str, int]:
    """The ML Program's operations by type, as the package holds them (constants left out)."""
    counts: dict[str, int] = {}
    for function in spec.mlProgram.functions.values():
        for block in function.block_specializations.values():
            for op in block.operations:
                if op.type == "const" or op.type.startswith("constexpr_"):
                    continue
                counts[op.type] = counts.get(op.type, 0) + 1
    return dict(sorted(counts.items()))


def feature(description: Any) -> dict[str, Any]:
    """An input as the package declares it: name, kind, element type and shape."""
    from coremltools.proto import FeatureTypes_pb2 as ft

    kind = description.type.WhichOneof("Type")
    out: dict[str, Any] = {"name": description.name, "kind": kind, "dtype": None, "shape": None}
    if kind == "multiArrayType":
        array = description.type.multiArrayType
        out["dtype"] = ft.ArrayFeatureType.ArrayDataType.Name(array.dataType)
        out["shape"] = [int(d) for d in array.shape]
    elif kind == "imageType":
        image = description.type.imageType
        out["dtype"] = ft.ImageFeatureType.ColorSpace.Name(image.colorSpace)
        out["shape"] = [int(image.height), int(image.width)]
    return out


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text())
    try:
        result = {"ok": True, **convert(request)}
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        traceback.print_exc()
        lines = str(exc).strip().splitlines()
        result = {"ok": False, "error": (lines[0] if lines else type(exc).__name__)[:400]}
    Path(argv[1]).write_text(json.dumps(result, indent=1, sort_keys=True))
    return 0 if result["ok"] else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
