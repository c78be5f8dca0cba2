"""`summary`: the one line of a toolchain's message the user reads beside the stage log. The messages
here are what rknn-toolkit2 2.5.0 and OpenVINO 2026.4 printed for real models on this machine."""

from __future__ import annotations

from backends.runners.bench_common import first_line
from backends.sdk.errors import summary

RKNN = """rknn-toolkit2 python failed: ValueError: Traceback (most recent call last):
Traceback (most recent call last):
  File "/root/.cache/npuctl/toolchains/rknn-2.5.0/lib/python3.11/site-packages/rknn/api/rknn.py", line 203, in build
    return self.rknn_base.build(do_quantization=do_quantization, dataset=dataset)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "rknn/api/rknn_log.py", line 95, in rknn.api.rknn_log.RKNNLog.e
ValueError: Traceback (most recent call last):
  File "rknn/api/graph_optimizer.py", line 945, in rknn.api.graph_optimizer.GraphOptimizer.fold_constant
  File "/root/.cache/npuctl/toolchains/rknn-2.5.0/lib/python3.11/site-packages/onnxruntime/capi/onnxruntime_inference_collection.py", line 528, in _create_inference_session
    sess = C.InferenceSession(session_options, self._model_bytes, False, self._read_config_from_model)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
onnxruntime.capi.onnxruntime_pybind11_state.InvalidGraph: [ONNXRuntimeError] : 10 : INVALID_GRAPH : This is \
an invalid model. Error Nodes in a graph must be topologically sorted, however input 'model.decoder.rnn.weight_ih' of node:
name: /model/decoder/rnn/Slice OpType: Slice
 is not output of any previous nodes."""

OPENVINO = """Exception from src/inference/src/cpp/infer_request.cpp:224:
Exception from src/plugins/intel_cpu/src/node.cpp:792:
[CPU] Reshape node with name '/model/Reshape' Check 'shape_size(input_shape) == shape_size(output_shape)' failed"""


def test_a_traceback_becomes_the_exception_it_ended_in() -> None:
    line = summary(RKNN)
    assert "\n" not in line and len(line) <= 300
    assert line.startswith("rknn-toolkit2 python failed: ValueError: onnxruntime.capi")
    assert "INVALID_GRAPH" in line and "Traceback" not in line and 'File "' not in line


def test_source_locations_give_way_to_the_reason() -> None:
    assert summary(OPENVINO) == (
        "[CPU] Reshape node with name '/model/Reshape' Check 'shape_size(input_shape) == "
        "shape_size(output_shape)' failed"
    )
    assert first_line(RuntimeError(OPENVINO)).startswith("[CPU] Reshape node with name")
    assert summary("inference failed: " + OPENVINO).startswith("inference failed: [CPU] Reshape node")


def test_a_plain_message_stays_as_it_is() -> None:
    assert summary("quantize: no calibration data") == "quantize: no calibration data"
    assert summary("x" * 400).endswith("...") and len(summary("x" * 400)) == 300


def test_one_line_skips_the_lines_that_only_say_where() -> None:
    """OpenVINO's compile errors open with C++ source locations; the user reads the failed check."""
    from backends.sdk.errors import one_line

    text = (
        "Exception from src/inference/src/cpp/core.cpp:117:\nException from src/inference/src/dev/plugin.cpp:54:\n"
        "Check 'm_element_type.is_static()' failed at src/inference/src/dev/make_tensor.cpp:58\n\n\n"
    )
    assert one_line(RuntimeError(text)) == (
        "Check 'm_element_type.is_static()' failed at src/inference/src/dev/make_tensor.cpp:58"
    )
    assert one_line(ValueError("")) == "ValueError"
