"""The task `npuctl init` suggests, from the outputs of real models."""

from __future__ import annotations

from pathlib import Path

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


def test_a_single_channel_map_without_a_sigmoid_is_no_mask_to_threshold(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """PP-OCRv4 det's text map ends in a Sigmoid: a probability map, `dense`. The same detector with
    its Sigmoid removed returns logits (unbounded, as a depth or density map is): thresholding them
    measures nothing, so the guess is the generic measure."""
    import onnx

    proto = onnx.load(str(rapidocr_model("ch_PP-OCRv4_det_infer.onnx")))
    (last,) = [n for n in proto.graph.node if n.output[0] == proto.graph.output[0].name]
    assert last.op_type == "Sigmoid"
    for node in proto.graph.node:
        node.input[:] = [last.input[0] if i == last.output[0] else i for i in node.input]
    proto.graph.node.remove(last)
    proto.graph.output[0].name = last.input[0]
    onnx.save(proto, str(tmp_path / "logits.onnx"))
    found = guess(tmp_path / "logits.onnx", {"x": [1, 3, 64, 64]})
    assert found.task == {"type": "regression"} and "unbounded values" in found.why, found.why
    assert "probability map" in guess(rapidocr_model("ch_PP-OCRv4_det_infer.onnx"), {"x": [1, 3, 64, 64]}).why


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


def test_init_at_the_users_shape_guesses_a_yolov8_export(git_repo, npuctl) -> None:  # type: ignore[no-untyped-def]
    """NudeNet's detector (a real YOLOv8 export, every input dim dynamic): at 64x64 its head [1, 22, 84]
    looks like 84 steps of 22 classes; at the user's 320x320 it is [1, 22, 2100], 2100 anchors."""
    from task_models import NUDENET, wheel_file

    model = git_repo / "models" / "320n.onnx"
    model.parent.mkdir()
    model.write_bytes(wheel_file(NUDENET, "nudenet", "320n.onnx", ("320n.onnx",)).read_bytes())
    done = npuctl(git_repo, "init", "models/320n.onnx", "--target", "cpu", "--input", "images=1,3,320,320")
    assert done.returncode == 0, done.stderr
    spec = (git_repo / "specs" / "320n-cpu.yaml").read_text()
    line = next(x for x in spec.splitlines() if "task:" in x)
    assert "task: {type: detection}" in line and "[1, 22, 2100]" in line, line


def test_a_text_model_s_per_token_output_is_a_tokens_task_not_ctc() -> None:
    """g2p-id's BERT (int64 token ids [N, 32] -> per-token scores [N, 32, 32], no mask): every position
    is a token, not a CTC line reader."""
    from task_models import G2P_ID, wheel_file

    bert = wheel_file(G2P_ID, "g2p_id", "models/bert/bert_mlm.onnx", ("models/bert/bert_mlm.onnx",))
    found = guess(bert, {"input_1": [1, 32]})
    assert found.task == {"type": "tokens"} and "no padding mask" in found.why, found.why


def test_an_encoder_s_per_token_states_are_no_tagger() -> None:
    """arabic-name-romanizer's GRU encoder reads ids and a mask like a tagger, but its [1, T, 256] output
    is the GRU's states, not a linear layer's class scores: reading them as 256 classes would score
    quantization on an argmax that means nothing, so the guess leaves the generic measure and says why."""
    from task_models import romanizer_encoder

    found = guess(romanizer_encoder(), {"src": [1, 24], "src_mask": [1, 24]})
    assert found.task == {"type": "regression"}, found.why
    assert "per-token features (GRU layer's output" in found.why, found.why


def test_a_decoder_step_is_scored_on_its_next_token_not_on_the_state_it_hands_on(tmp_path: Path) -> None:
    """arabic-name-romanizer's decoder step returns the next character's log-probabilities beside the
    GRU state shaped like its `hidden` input: classification of the scores, the state left unscored.
    The same scores beside an output no input is shaped like stay a set of results no task covers."""
    import onnx
    from onnx import helper
    from task_models import romanizer_decoder

    shapes = {"prefix": [1, 8], "memory": [1, 16, 256], "src_mask": [1, 16], "hidden": [1, 2, 256]}
    found = guess(romanizer_decoder(), shapes)
    assert found.task == {"type": "classification", "output": "logprobs"}, found.why
    assert "hidden_out (shaped like input hidden)" in found.why, found.why

    model = onnx.load(str(romanizer_decoder()))
    model.graph.node.append(helper.make_node("ReduceMean", ["hidden_out"], ["pooled"], axes=[1], keepdims=0))
    model.graph.output.append(helper.make_tensor_value_info("pooled", onnx.TensorProto.FLOAT, None))
    del model.graph.output[1]
    path = tmp_path / "decoder_pooled.onnx"
    onnx.save(model, str(path))
    assert guess(path, shapes).task == {"type": "regression"}


def test_per_step_states_of_a_signal_are_no_ctc_when_a_middle_class_wins_on_zeros(tmp_path: Path) -> None:
    """An EEG net's per-step seizure states [T, 1, 4] have the layout of a CTC head, but on an all-zero
    input class 1 wins every step, where a CTC model emits its blank (first or last): decoding CTC
    strings from it would score nonsense, so the guess leaves the generic measure and says why."""
    import onnx
    from task_models import eeg_seizure

    model = onnx.load(str(eeg_seizure()))
    del model.graph.output[0]  # the Softmax alone: one output, nothing else to read
    path = tmp_path / "eeg_probs.onnx"
    onnx.save(model, str(path))
    found = guess(path, {"x": [1, 100, 300]})
    assert found.task == {"type": "regression"}, found.why
    assert "but not CTC: on an empty (all-zero) input class 1 of 4 wins 300 of 300 steps" in found.why


def test_a_sequence_tagger_s_padding_mask_and_its_convention_come_from_running_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """khmersm's transformer encoder: ids x, mask true at real characters. The same model behind a Not
    takes PyTorch's key-padding mask (true at padding): the guess follows the model, not the name."""
    from task_models import padding_mask_inverted, segmenter

    found = guess(segmenter(), {"x": [1, 32], "mask": [1, 32]})
    assert found.task == {"type": "tokens", "mask": "mask", "pad_value": 0}, found.why
    assert "false at padded positions" in found.why
    assert yaml_line(found) == "task: {type: tokens, mask: mask, pad_value: 0}"
    inverted = padding_mask_inverted(segmenter(), tmp_path / "pad.onnx")
    found = guess(inverted, {"x": [1, 32], "pad": [1, 32]})
    assert found.task == {"type": "tokens", "mask": "pad", "pad_value": 1}, found.why


def test_several_same_rank_outputs_are_no_yolo_head() -> None:
    """basic-pitch's transcription net (note, onset and contour posteriorgrams [1, 172, 88/264]): its
    first output read alone looked like 172 anchors of a YOLOX head; three outputs of rank 3 that form
    no SSD or GFL head are left to the generic measure. A YOLOv8-seg head (rank 3 beside its rank-4
    mask prototypes) is still a detector."""
    from task_models import wheel_file

    pitch = wheel_file(
        "basic-pitch==0.4.0",
        "basic_pitch",
        "saved_models/icassp_2022/nmp.onnx",
        ("saved_models/icassp_2022/nmp.onnx",),
    )
    found = guess(pitch, {"serving_default_input_2:0": [1, 43844, 1]})
    assert found.task == {"type": "regression"} and "no SSD or GFL head" in found.why, found.why
    seg = wheel_file(
        "captcha-recognizer==1.0.2", "captcha_recognizer", "models/slider.onnx", ("models/slider.onnx",)
    )
    assert guess(seg).task == {"type": "detection"}


def test_a_ctc_head_whose_blank_is_its_last_class_is_guessed_so(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """PP-OCRv4's recognizer with its classes rotated by one (a Gather on the last axis), as exporters
    that put the blank last write it: on an empty input the blank wins every step, now at index C-1."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    proto = onnx.load(str(rapidocr_model("ch_PP-OCRv4_rec_infer.onnx")))
    out = proto.graph.output[0]
    classes = out.type.tensor_type.shape.dim[-1].dim_value
    order = np.concatenate([np.arange(1, classes), [0]]).astype(np.int64)
    proto.graph.initializer.append(numpy_helper.from_array(order, "rotated_classes"))
    proto.graph.node.append(helper.make_node("Gather", [out.name, "rotated_classes"], ["rotated"], axis=2))
    rotated = helper.make_tensor_value_info("rotated", onnx.TensorProto.FLOAT, None)
    del proto.graph.output[:]
    proto.graph.output.append(rotated)
    path = tmp_path / "blank_last.onnx"
    onnx.save(proto, str(path))
    found = guess(path, {"x": [1, 3, 48, 320]})
    assert found.task == {"type": "ctc", "blank": classes - 1}, found.why
    assert f"blank {classes - 1}: it wins" in found.why
    rec = guess(rapidocr_model("ch_PP-OCRv4_rec_infer.onnx"), {"x": [1, 3, 48, 320]})
    assert rec.task == {"type": "ctc", "blank": 0} and "blank 0: it wins" in rec.why
