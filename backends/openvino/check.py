"""OpenVINO's check stage: the shared placement, with the plugin's own answer where it has one.

`core.query_model(model, "NPU")` lists the ops the NPU plugin will run; when an NPU is present its
map wins over the op table (backends.passes.placement takes a backend's node -> device map, and the
report's `source` names it). Without an NPU, querying the CPU plugin says nothing about the NPU, so
the table placement stays and the report records what the CPU plugin (which measures on this host)
accepts. OpenVINO names ops by their ONNX node name or output tensor name; both are matched.
"""

from __future__ import annotations

from typing import Any

from backends.openvino import fingerprint
from backends.passes.check import CheckPass, quantization_config
from backends.sdk.base import StageOutput, StageRequest
from backends.sdk.vocab import NODES_THAT_RUN


def device_map(model: Any, supported: dict[str, str], device: str) -> dict[str, str]:
    """ONNX node name -> "NPU"/"CPU" from a query_model result (op name -> device)."""
    out = {}
    for node in model.graph.node:
        keys = [node.name, *node.output]
        hit = next((supported[k] for k in keys if k in supported), None)
        out[node.name] = "NPU" if hit is not None and hit.startswith(device) else "CPU"
    return out


def query(model_path: str, device: str) -> dict[str, str]:
    import openvino as ov

    core = ov.Core()
    return {str(k): str(v) for k, v in core.query_model(core.read_model(model_path), device).items()}


class OpenVinoCheck(CheckPass):
    def fingerprint(self) -> dict[str, str]:
        return {**super().fingerprint(), **fingerprint()}

    def run(self, request: StageRequest) -> StageOutput:
        import openvino as ov

        available = list(ov.Core().available_devices)
        if "NPU" not in available:
            output = super().run(request)
            cpu = query(str(request.inputs["model"]), "CPU")
            output.report["openvino_query"] = {
                "device": "CPU",
                "npu_present": False,
                "ops_supported": len(cpu),
                "note": "no NPU here: placement is the op table's; the CPU plugin (host measurements) "
                f"accepts all {len(cpu)} ops",
            }
            return output
        return self._npu(request)

    def _npu(self, request: StageRequest) -> StageOutput:
        import onnx

        from backends.passes import placement as P
        from backends.passes.check import dump_json, summarize, write_log

        model = onnx.load(str(request.inputs["model"]))
        supported = query(str(request.inputs["model"]), "NPU")
        mapping = device_map(model, supported, "NPU")
        source = f"openvino {fingerprint()['openvino']} query_model(NPU)"
        report = P.compute(
            model,
            request.target,
            quantization_config(request.config),
            device_map=mapping,
            device_map_source=source,
        )
        path = request.workdir / "placement.json"
        path.write_text(dump_json(report))
        write_log(request.log, report)
        summary = summarize(report)
        summary["measurements"] = P.measurements(report)
        summary["openvino_query"] = {"device": "NPU", "npu_present": True, "ops_supported": len(supported)}
        cov = report["coverage"]["nodes"]
        note = f"{cov['npu']}/{cov['total']} {NODES_THAT_RUN} on the NPU ({source})"
        return StageOutput(artifacts={"placement": path}, report=summary, note=note)
