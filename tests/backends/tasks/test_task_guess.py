"""The task `npuctl init` suggests, from the outputs of real models."""

from __future__ import annotations

from task_models import ddddocr_model, rapidocr_model

from backends.tasks.guess import guess, yaml_line


def test_guesses_on_real_models() -> None:
    det = guess(ddddocr_model("common_det.onnx"))
    assert det.task == {"type": "detection"} and "YOLOX/YOLOv5-style head [1, N, 5+C]" in det.why
    ocr = guess(ddddocr_model("common.onnx"))  # declares [1, seqlen]; one run shows [T, 1, C]
    assert (
        ocr.task == {"type": "ctc", "blank": 0} and "[T, 1, C]" in ocr.why and "one run on zeros" in ocr.why
    )
    rec = guess(rapidocr_model("ch_PP-OCRv4_rec_infer.onnx"))
    assert yaml_line(rec) == "task: {type: ctc, blank: 0}"
    assert guess(rapidocr_model("ch_ppocr_mobile_v2.0_cls_infer.onnx")).task == {"type": "classification"}
    assert guess(rapidocr_model("ch_PP-OCRv4_det_infer.onnx")).task == {"type": "dense"}


def test_guesses_a_yolov8_head(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import onnx
    from task_models import yolov8_head

    path = yolov8_head(ddddocr_model("common_det.onnx"), tmp_path / "v8.onnx")
    proto = onnx.load(str(path))
    del proto.graph.output[:]
    proto.graph.output.append(
        onnx.helper.make_tensor_value_info("boxes_scores", onnx.TensorProto.FLOAT, [1, 5, 3549])
    )
    onnx.save(proto, str(path))
    found = guess(path)
    assert found.task == {"type": "detection"} and "YOLOv8-style head [1, 4+C, N]" in found.why
