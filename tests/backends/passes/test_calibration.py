"""Calibration ranges are cached by what determines them: changing only sensitive layers reuses them."""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from quant_helpers import DIGITS_CALIB, digits_model, ptq_config, run_quantize

from backends.passes.quant import calibration
from backends.passes.quant.calibration import ChunkReader, Settings, cache_key


def test_changing_only_sensitive_layers_reuses_cached_ranges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = digits_model(tmp_path)
    cache = tmp_path / "cache"
    first = run_quantize(ptq_config(samples=64), model, tmp_path / "a", cache_dir=cache)
    assert first.report["calibration"]["cache"] == "miss"
    assert len(list((cache / "calibration").glob("*.json"))) == 1

    def no_calibrator(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the calibrator ran although the ranges were cached")

    monkeypatch.setattr(calibration, "compute_ranges", no_calibrator)
    for module in ("onnxruntime.quantization.calibrate", "onnxruntime.quantization.quantize"):
        monkeypatch.setattr(importlib.import_module(module), "create_calibrator", no_calibrator)
    for i, rules in enumerate(
        ({"keep": "fp32", "op_types": ["Gemm"]}, {"keep": "int16", "first": 1}, {"keep": "fp32", "last": 2})
    ):
        out = run_quantize(
            ptq_config(samples=64, sensitive_layers=rules), model, tmp_path / f"b{i}", cache_dir=cache
        )
        assert out.report["calibration"]["cache"] == "hit"
        assert out.report["calibration"]["digest"] == first.report["calibration"]["digest"]
        assert out.report["kept"]
    weights = run_quantize(ptq_config(samples=64, weights="uint8"), model, tmp_path / "c", cache_dir=cache)
    assert (
        weights.report["calibration"]["cache"] == "hit"
    )  # the weight type does not change activation ranges


def test_a_change_in_samples_or_method_recalibrates(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    cache = tmp_path / "cache"
    base = run_quantize(ptq_config(samples=32), model, tmp_path / "a", cache_dir=cache).report["calibration"]
    more = run_quantize(ptq_config(samples=33), model, tmp_path / "b", cache_dir=cache).report["calibration"]
    config = ptq_config(samples=32)
    config["calibration"]["method"] = "percentile"
    method = run_quantize(config, model, tmp_path / "c", cache_dir=cache).report["calibration"]
    assert more["cache"] == "miss" and method["cache"] == "miss"
    assert len({base["digest"], more["digest"], method["digest"]}) == 3


def test_the_key_follows_sample_content_not_names(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    files = sorted(DIGITS_CALIB.glob("*.npy"))[:4]
    key = cache_key(model, files, Settings())
    assert key == cache_key(model, files, Settings())
    assert key != cache_key(model, files, Settings(symmetric=True))
    assert key != cache_key(model, files, Settings(method="percentile", percentile=99.9))
    changed = tmp_path / "changed"
    changed.mkdir()
    copies = []
    for path in files:
        target = changed / path.name
        target.write_bytes(path.read_bytes())
        copies.append(target)
    assert cache_key(model, copies, Settings()) == key
    np.save(copies[0], np.load(copies[0]) + 1.0)
    assert cache_key(model, copies, Settings()) != key


def test_without_a_cache_folder_ranges_are_computed_and_the_report_says_so(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    out = run_quantize(ptq_config(samples=16), model, tmp_path / "w")
    assert out.report["calibration"]["cache"] == "off"
    assert any("not cached" in note for note in out.report["notes"])
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["model.onnx", "quantize.log"]


def test_env_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPUCTL_CACHE_DIR", str(tmp_path / "env"))
    model = digits_model(tmp_path)
    assert run_quantize(ptq_config(samples=8), model, tmp_path / "a").report["calibration"]["cache"] == "miss"
    assert run_quantize(ptq_config(samples=8), model, tmp_path / "b").report["calibration"]["cache"] == "hit"


def test_a_corrupt_cache_entry_is_recomputed(tmp_path: Path) -> None:
    model = digits_model(tmp_path)
    cache = tmp_path / "cache"
    digest = run_quantize(ptq_config(samples=8), model, tmp_path / "a", cache_dir=cache).report[
        "calibration"
    ]["digest"]
    entry = cache / "calibration" / f"{digest}.json"
    first = hashlib.sha256(entry.read_bytes()).hexdigest()
    entry.write_text("{not json")
    again = run_quantize(ptq_config(samples=8), model, tmp_path / "b", cache_dir=cache).report["calibration"]
    assert again["cache"] == "miss" and hashlib.sha256(entry.read_bytes()).hexdigest() == first


def test_chunk_reader_protocol() -> None:
    feeds = [{"x": np.zeros(1)}, {"x": np.ones(1)}]
    reader = ChunkReader(feeds)
    assert len(reader) == 2
    assert reader.get_next() is feeds[0] and reader.get_next() is feeds[1] and reader.get_next() is None
    reader.rewind()
    assert reader.get_next() is feeds[0]


def _conv_chain(folder: Path, depth: int, channels: int, side: int) -> Path:
    """A plain Conv/Relu chain whose every intermediate tensor is channels x side x side floats."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(depth):
        w = rng.normal(0, 0.5, (channels, channels, 1, 1)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], name=f"conv{i}"))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        x = f"r{i}"
    shape = [1, channels, side, side]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)],
        inits,
    )
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    )
    path = folder / "chain.onnx"
    onnx.save(model, path)
    return path


def _samples(folder: Path, count: int, shape: tuple[int, ...]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    files = []
    for i in range(count):
        files.append(folder / f"{i:02d}.npy")
        np.save(files[-1], rng.normal(0, 1, shape).astype(np.float32))
    return files


def _stock_minmax(model: Path, files: list[Path], op_types: list[str], scratch: Path) -> dict[str, Any]:
    """ONNX Runtime's own MinMax calibrator, its own session, every sample in one collect call."""
    from onnxruntime.quantization.calibrate import CalibrationMethod, create_calibrator

    calibrator = create_calibrator(
        model,
        op_types,
        augmented_model_path=str(scratch / "stock.onnx"),
        calibrate_method=CalibrationMethod.MinMax,
    )
    name = calibrator.infer_session.get_inputs()[0].name
    calibrator.collect_data(ChunkReader([{name: np.load(f)} for f in files]))
    return {k: tuple(np.asarray(v.range_value).tolist()) for k, v in calibrator.compute_data().items()}


@pytest.mark.parametrize("which", ["digits", "conv"])
def test_streamed_minmax_ranges_equal_ort_stock_calibrator(tmp_path: Path, which: str) -> None:
    if which == "digits":
        model, files, ops = (
            digits_model(tmp_path),
            sorted(DIGITS_CALIB.glob("*.npy"))[:24],
            ["Gemm", "MatMul"],
        )
    else:
        model = _conv_chain(tmp_path, depth=4, channels=4, side=16)
        files, ops = _samples(tmp_path / "s", 7, (1, 4, 16, 16)), ["Conv", "Relu"]
    expected = _stock_minmax(model, files, ops, tmp_path)
    ranges = calibration.compute_ranges(model, files, Settings(), ops, tmp_path)
    got = {k: tuple(np.asarray(v.range_value).tolist()) for k, v in ranges.items()}
    assert got == expected and len(expected) >= 3


_PEAK = """
import json, resource, sys
from pathlib import Path
from backends.passes.quant import calibration
model, scratch, files = Path(sys.argv[1]), Path(sys.argv[2]), [Path(p) for p in sys.argv[3:]]
calibration.data.read_sample(files[0], calibration.data.model_inputs(model))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
calibration.compute_ranges(model, files, calibration.Settings(), ["Conv", "Relu"], scratch)
print(json.dumps({"growth_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before}))
"""


def test_calibration_memory_does_not_hold_every_intermediate_tensor(tmp_path: Path) -> None:
    """40 intermediate tensors of 4 MiB each. ORT's default execution order for the augmented graph
    keeps them all alive (measured: +355 MiB); in priority order a few at a time (+40 MiB)."""
    import json
    import subprocess

    from backends.sdk.process import python_argv

    model = _conv_chain(tmp_path, depth=20, channels=16, side=256)
    files = _samples(tmp_path / "s", 3, (1, 16, 256, 256))
    done = subprocess.run(
        python_argv("-c", _PEAK, str(model), str(tmp_path), *map(str, files)),
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    growth_mib = json.loads(done.stdout.strip().splitlines()[-1])["growth_kb"] / 1024
    assert growth_mib < 100, f"calibration grew peak memory by {growth_mib:.0f} MiB"
