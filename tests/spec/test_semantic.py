"""Semantic checks against real files and real ONNX graphs; paths; the model summary cache."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from reconciler.spec import (
    ModelError,
    SpecErrors,
    _summary,
    check,
    load,
    model_file,
    model_summary,
    resolve_path,
)
from reconciler.state.statcache import RACY_NS
from tests.spec.conftest import GOOD, GOOD_CLS, Repo, copy_quantized, edit

CLS_IN_PACKAGE = """\
apiVersion: npuctl/v1
kind: Deployment
metadata: {name: cls-pkg}
spec:
  model:
    package: rapidocr_onnxruntime
    path: models/ch_ppocr_mobile_v2.0_cls_infer.onnx
  target: rk3588
  inputs: {x: [1, 3, 48, 192]}
  shape_variants: [{x: [1, 3, 48, 320]}, {x: [4, 3, 48, 192]}]
  preprocess: {input: x, layout: nhwc, dtype: uint8, mean: [127.5, 127.5, 127.5], std: [127.5, 127.5, 127.5]}
  quantization:
    mode: fp16
    sensitive_layers: {op_types: [Softmax, HardSigmoid]}
  evaluate: {data: ../data/eval}
"""


def test_dynamic_model_with_every_dim_fixed_is_valid(repo: Repo) -> None:
    (report,) = check([repo.write("specs/a.yaml", GOOD_CLS)], repo.root)
    assert report.valid, [str(e) for e in report.errors]


def test_model_inside_an_installed_package_is_located_without_importing_it(repo: Repo) -> None:
    imported_before = "rapidocr_onnxruntime" in sys.modules
    (report,) = check([repo.write("specs/a.yaml", CLS_IN_PACKAGE)], repo.root)
    assert report.valid, [str(e) for e in report.errors]
    assert report.spec is not None
    assert model_file(report.spec, repo.root).name == "ch_ppocr_mobile_v2.0_cls_infer.onnx"
    if not imported_before:
        assert "rapidocr_onnxruntime" not in sys.modules


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("{package: onnx, path: ../rapidocr_onnxruntime/__init__.py}",
         "spec.model.path: '../rapidocr_onnxruntime/__init__.py' resolves outside the package folder"),
        ("{package: onnx, path: /etc/passwd}", "spec.model.path: '/etc/passwd' is absolute"),
        ("{package: difflib, path: x.onnx}", "spec.model.package: 'difflib' is a module, not a package"),
        ("{package: onnx, path: nothere.onnx}", "spec.model.path: model file not found"),
    ],
)  # fmt: skip
def test_package_models_stay_in_their_package(repo: Repo, model: str, message: str) -> None:
    text = edit(GOOD, {6: f"  model: {model}", 7: "  #"})
    (report,) = check([repo.write("specs/a.yaml", text)], repo.root)
    assert any(message in str(e) for e in report.errors), [str(e) for e in report.errors]


def test_resolve_path_confines_to_the_root(repo: Repo, tmp_path: Path) -> None:
    spec = load(repo.write("specs/a.yaml", GOOD), repo.root)
    assert (
        resolve_path(spec, "../data/calib", repo.root, "quantization.calibration.data")
        == (repo.root / "data/calib").resolve()
    )
    (repo.root / "data" / "inside-link").symlink_to(repo.root / "models")
    assert (
        resolve_path(spec, "../data/inside-link", repo.root, "evaluate.data")
        == (repo.root / "models").resolve()
    )
    (repo.root / "data" / "outside-link").symlink_to(tmp_path)
    with pytest.raises(SpecErrors) as caught:
        resolve_path(spec, "../data/outside-link", repo.root, "spec.evaluate.data")
    (error,) = caught.value.errors
    assert (error.field, error.line, error.column) == ("spec.evaluate.data", 20, 11)
    assert "outside the repository" in error.message


def test_missing_calibration_folder(repo: Repo) -> None:
    (report,) = check(
        [repo.write("specs/a.yaml", edit(GOOD, {14: "      data: ../data/nocalib"}))], repo.root
    )
    missing = repo.root.resolve() / "data" / "nocalib"
    assert [str(e) for e in report.errors] == [
        f"specs/a.yaml:14:13: spec.quantization.calibration.data: folder not found: {missing}"
    ]


def _vector_model(repo: Repo, node_name: str) -> None:
    """A tiny real model with a rank-2 input v [1, n] and one Relu node."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["v"], ["y"], name=node_name)],
        "g",
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, "n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "n"])],
    )
    onnx.save(helper.make_model(graph), repo.root / "models" / "vec.onnx")


VECTOR = GOOD_CLS.replace("cls.onnx", "vec.onnx").replace("x: [1, 3, 48, 192]", "v: [1, 16]")


def test_unnamed_nodes_are_addressed_by_the_names_import_gives_them(repo: Repo) -> None:
    """One naming rule for validation and for every stage: an unnamed node is `<op_type>_<index>`."""
    _vector_model(repo, "")
    text = VECTOR + "  quantization:\n    sensitive_layers: {nodes: [relu], op_types: [Relu]}\n"
    (report,) = check([repo.write("specs/a.yaml", text)], repo.root)
    assert [e.message for e in report.errors] == ["'relu' matches no node; did you mean 'Relu_0'?"]
    fixed = VECTOR + "  quantization:\n    sensitive_layers: {nodes: [Relu_0]}\n"
    (report,) = check([repo.write("specs/b.yaml", fixed.replace("name: cls", "name: cls-b"))], repo.root)
    assert report.errors == ()


def test_node_globs_match_names(repo: Repo) -> None:
    _vector_model(repo, "block1/relu")
    text = VECTOR + "  quantization:\n    sensitive_layers: {nodes: [block1/relu, 'block?/*', 'Block1/*']}\n"
    (report,) = check([repo.write("specs/a.yaml", text)], repo.root)
    assert [e.message for e in report.errors] == ["'Block1/*' matches no node; did you mean 'block1/relu'?"]


def test_preprocess_needs_an_image_input(repo: Repo) -> None:
    _vector_model(repo, "relu")
    text = VECTOR + "  preprocess: {mean: [0.5]}\n"
    (report,) = check([repo.write("specs/a.yaml", text)], repo.root)
    assert [str(e) for e in report.errors] == [
        "specs/a.yaml:10:3: spec.preprocess: preprocessing takes an image input of rank 4; 'v' has rank 2"
    ]


def test_summary_is_cached_and_reused(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    model = (repo.root / "models" / "cls.onnx").resolve()
    time.sleep(RACY_NS / 1e9 + 0.05)  # a model changed within the racy window is not cached
    first = model_summary(model, repo.root)
    assert [(i.name, i.dims) for i in first.inputs] == [("x", (None, 3, "?", "?"))]
    assert ("Softmax@0", "Softmax") in first.nodes and ("Constant_0", "Constant") in first.nodes
    cached = list((repo.root / ".npuctl" / "cache" / "onnx-summary").glob("*.json"))
    assert len(cached) == 1 and json.loads(cached[0].read_text())["inputs"][0]["name"] == "x"
    _summary._memo.clear()

    def boom(path: Path) -> _summary.ModelSummary:
        raise AssertionError("the cache should have answered")

    monkeypatch.setattr(_summary, "summarize", boom)
    assert model_summary(model, repo.root) == first


def test_recently_modified_models_are_not_cached(repo: Repo) -> None:
    model = (repo.root / "models" / "squeezenet.onnx").resolve()
    os.utime(model)  # now: within the timestamp-granularity guard
    model_summary(model, repo.root)
    assert not (repo.root / ".npuctl" / "cache" / "onnx-summary").exists()


def test_a_changed_model_is_summarized_again(repo: Repo) -> None:
    target = repo.root / "models" / "m.onnx"
    target.write_bytes((repo.root / "models" / "squeezenet.onnx").read_bytes())
    os.utime(target, (1_600_000_000, 1_600_000_000))
    before = model_summary(target.resolve(), repo.root)
    target.write_bytes((repo.root / "models" / "cls.onnx").read_bytes())
    os.utime(target, (1_600_000_100, 1_600_000_100))
    after = model_summary(target.resolve(), repo.root)
    assert before.inputs[0].name == "data_0" and after.inputs[0].name == "x"


@pytest.mark.parametrize(
    ("content", "message"), [(b"", "it has no graph"), (b"\x08\x07garbage\xff", "not a readable")]
)
def test_not_onnx_is_one_clear_line(repo: Repo, content: bytes, message: str) -> None:
    bad = repo.root / "models" / "bad.onnx"
    bad.write_bytes(content)
    with pytest.raises(ModelError) as caught:
        model_summary(bad.resolve(), repo.root)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_resize_without_source_size_under_ptq_is_caught_before_any_build(repo: Repo) -> None:
    resize = "  preprocess:\n    resize: {height: 224, width: 224, source_height: 480}\n"
    (report,) = check([repo.write("specs/a.yaml", GOOD + resize)], repo.root)
    assert [str(e) for e in report.errors] == [
        "specs/a.yaml:26:13: spec.preprocess.resize: source_width needed: quantization.mode ptq calibrates "
        "on fixed shapes, so the raw frame's size must be fixed"
    ]
    fixed = "  preprocess:\n    resize: {height: 224, width: 224, source_height: 480, source_width: 640}\n"
    (report,) = check([repo.write("specs/a.yaml", GOOD + fixed)], repo.root)
    assert report.valid, [str(e) for e in report.errors]


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ("{type: dense}", "spec.evaluate.labels: a dense task is measured against the float model's outputs"),
        ("{type: regression}", "spec.evaluate.labels: a regression task is measured against the float model"),
        ("{type: tokens}", "spec.evaluate.labels: a tokens task is measured against the float model"),
        ("{type: ctc}", "spec.evaluate.task: text labels need evaluate.task.charset"),
        ("{type: ctc, charset: ../data/nochars.txt}", "spec.evaluate.task.charset: file not found"),
    ],
)
def test_labels_the_declared_task_cannot_read(repo: Repo, task: str, message: str) -> None:
    (repo.root / "data" / "labels.txt").write_text("0000.npy 0\n")
    text = (
        GOOD_CLS + f"  evaluate:\n    data: ../data/eval\n    labels: ../data/labels.txt\n    task: {task}\n"
    )
    (report,) = check([repo.write("specs/t.yaml", text)], repo.root)
    assert any(message in str(e) for e in report.errors), [str(e) for e in report.errors]


def test_case_folding_without_a_charset_is_an_error_at_its_field(repo: Repo) -> None:
    """Class indices have no case: `case_sensitive: false` needs the characters, and says so where it is."""
    text = GOOD_CLS + "  evaluate:\n    data: ../data/eval\n    task: {type: ctc, case_sensitive: false}\n"
    (report,) = check([repo.write("specs/t.yaml", text)], repo.root)
    (error,) = [e for e in report.errors if "case_sensitive" in str(e)]
    assert str(error).startswith("specs/t.yaml:"), str(error)
    assert "spec.evaluate.task.case_sensitive: case folding compares characters" in str(error)


def test_a_tokens_task_s_mask_is_an_input_of_the_model(repo: Repo) -> None:
    text = GOOD_CLS + "  evaluate:\n    data: ../data/eval\n    task: {type: tokens, mask: attention_mask}\n"
    (report,) = check([repo.write("specs/t.yaml", text)], repo.root)
    (error,) = [e for e in report.errors if "mask" in str(e)]
    assert "spec.evaluate.task.mask: the model has no input 'attention_mask'" in str(error), str(error)


@pytest.mark.parametrize(
    ("model", "mode", "message"),
    [
        ("qdq", "ptq", "the model is already quantized (DequantizeLinear x"),
        ("qdq", "fp16", "fp16 would cast its integer arithmetic to fp16; mode: qat builds it"),
        ("cls", "qat", "qat builds a model that carries QuantizeLinear/DequantizeLinear nodes; this one"),
        ("integer", "qat", "already quantized with integer operators (DynamicQuantizeLinear x"),
        ("integer", "ptq", "already quantized with integer operators"),
    ],
)
def test_a_mode_that_does_not_fit_a_model_quantized_on_arrival_is_an_error_at_the_mode(
    repo: Repo, quantized_models: dict[str, Path], model: str, mode: str, message: str
) -> None:
    """ONNX Runtime's own quantizers made the models; the error stands on the mode's line and column."""
    copy_quantized(repo, quantized_models)
    text = GOOD_CLS.replace("cls.onnx", f"{model}.onnx") + f"  quantization:\n    mode: {mode}\n"
    if mode == "ptq":
        text += "    calibration: {data: ../data/calib}\n"
    (report,) = check([repo.write("specs/q.yaml", text)], repo.root)
    errors = [str(e) for e in report.errors]
    assert len(errors) == 1 and errors[0].startswith("specs/q.yaml:11:11: spec.quantization.mode: "), errors
    assert message in errors[0], errors[0]


@pytest.mark.parametrize(("model", "mode"), [("qdq", "qat"), ("qdq", "none"), ("integer", "none")])
def test_a_model_quantized_on_arrival_validates_in_the_mode_that_builds_it(
    repo: Repo, quantized_models: dict[str, Path], model: str, mode: str
) -> None:
    copy_quantized(repo, quantized_models)
    text = GOOD_CLS.replace("cls.onnx", f"{model}.onnx") + f"  quantization: {{mode: {mode}}}\n"
    (report,) = check([repo.write("specs/q.yaml", text)], repo.root)
    assert report.valid, [str(e) for e in report.errors]
