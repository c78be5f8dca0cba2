"""The shared sample reader: exact counts, seeded selection, .npy/.npz/images, labels, random feeds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from PIL import Image

from backends.passes.data import (
    FeedReader,
    InputSpec,
    iter_samples,
    labels_for,
    load_samples,
    model_inputs,
    random_samples,
    read_labels,
    read_sample,
    sample_set,
    select_files,
)
from backends.sdk.errors import TerminalError

FLOAT_IN = [InputSpec("x", (1, 3, 4, 4), "float32")]
UINT8_NHWC = [InputSpec("frame", (1, 6, 8, 3), "uint8")]


def _npy_folder(folder: Path, count: int, shape: tuple[int, ...] = (3, 4, 4)) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        np.save(folder / f"{i:04d}.npy", np.full(shape, i, np.float32))
    return folder


def test_count_is_honoured_exactly(tmp_path: Path) -> None:
    folder = _npy_folder(tmp_path / "calib", 12)
    samples = load_samples(folder, FLOAT_IN, count=5, seed=0, role="calibration")
    assert len(samples) == 5
    assert [s.name for s in samples] == sorted(s.name for s in samples)
    assert all(s.feed["x"].shape == (1, 3, 4, 4) and s.feed["x"].dtype == np.float32 for s in samples)
    assert len(load_samples(folder, FLOAT_IN)) == 12


def test_fewer_samples_than_asked_is_a_clear_error(tmp_path: Path) -> None:
    folder = _npy_folder(tmp_path / "calib", 120, shape=(1,))
    with pytest.raises(TerminalError) as info:
        select_files(folder, count=300, role="calibration")
    assert str(info.value) == f"calibration folder {folder} has 120 samples, spec asks for 300"


def test_a_folder_of_subfolders_says_they_are_not_searched(tmp_path: Path) -> None:
    folder = tmp_path / "calib"
    for name in ("cats", "dogs", "owls", "yaks"):
        _npy_folder(folder / name, 2, shape=(1,))
    with pytest.raises(TerminalError) as info:
        select_files(folder, role="calibration")
    said = str(info.value)
    assert said.startswith(f"calibration folder {folder} holds no samples (.npy, ")
    assert "its 4 subfolder(s) (cats, dogs, owls and 1 more) are not searched" in said
    (folder / "cats" / "0000.npy").rename(folder / "0000.npy")
    assert select_files(folder) == [folder / "0000.npy"]


def test_seed_selects_a_deterministic_subset(tmp_path: Path) -> None:
    folder = _npy_folder(tmp_path / "calib", 40, shape=(1,))
    first = [p.name for p in select_files(folder, count=10, seed=7)]
    again = [p.name for p in select_files(folder, count=10, seed=7)]
    other = [p.name for p in select_files(folder, count=10, seed=8)]
    assert first == again
    assert first == sorted(first)
    assert first != other
    assert len(set(first)) == 10
    # Adding a file changes a seeded selection by at most one file.
    np.save(folder / "zzzz.npy", np.zeros(1, np.float32))
    grown = [p.name for p in select_files(folder, count=10, seed=7)]
    assert len(set(first) - set(grown)) <= 1
    assert [p.name for p in select_files(folder, count=41, seed=3)] == sorted(
        p.name for p in folder.iterdir()
    )


def test_files_are_read_in_sorted_name_order_and_others_ignored(tmp_path: Path) -> None:
    folder = _npy_folder(tmp_path / "d", 3)
    (folder / "labels.txt").write_text("0000.npy 1\n")
    (folder / ".hidden.npy").write_bytes(b"junk")
    (folder / "sub").mkdir()
    names = [s.name for s in iter_samples(folder, FLOAT_IN)]
    assert names == ["0000.npy", "0001.npy", "0002.npy"]
    assert [float(s.feed["x"].flat[0]) for s in iter_samples(folder, FLOAT_IN)] == [0.0, 1.0, 2.0]


def test_array_coercion_rules(tmp_path: Path) -> None:
    np.save(tmp_path / "f64.npy", np.ones((1, 3, 4, 4), np.float64))
    assert read_sample(tmp_path / "f64.npy", FLOAT_IN).feed["x"].dtype == np.float32
    np.save(tmp_path / "bad_shape.npy", np.ones((3, 5, 4), np.float32))
    with pytest.raises(TerminalError, match=r"bad_shape\.npy: array for input x has shape \[3, 5, 4\]"):
        read_sample(tmp_path / "bad_shape.npy", FLOAT_IN)
    np.save(tmp_path / "float.npy", np.ones((1, 6, 8, 3), np.float32))
    with pytest.raises(TerminalError, match=r"float\.npy: float32 data cannot feed input frame"):
        read_sample(tmp_path / "float.npy", UINT8_NHWC)
    np.save(tmp_path / "ints.npy", np.full((1, 6, 8, 3), 255, np.int64))
    assert read_sample(tmp_path / "ints.npy", UINT8_NHWC).feed["frame"].dtype == np.uint8
    np.save(tmp_path / "big.npy", np.full((1, 6, 8, 3), 256, np.int64))
    with pytest.raises(TerminalError, match=r"big\.npy"):
        read_sample(tmp_path / "big.npy", UINT8_NHWC)


def test_npz_is_keyed_by_input_name(tmp_path: Path) -> None:
    inputs = [InputSpec("a", (1, 2), "float32"), InputSpec("b", (1, 3), "int64")]
    np.savez(tmp_path / "s.npz", a=np.ones((1, 2), np.float32), b=np.arange(3))
    feed = read_sample(tmp_path / "s.npz", inputs).feed
    assert feed["a"].shape == (1, 2) and feed["b"].tolist() == [[0, 1, 2]] and feed["b"].dtype == np.int64
    np.savez(tmp_path / "missing.npz", a=np.ones((1, 2), np.float32), c=np.ones(3))
    with pytest.raises(TerminalError, match="missing b; unknown c"):
        read_sample(tmp_path / "missing.npz", inputs)
    np.save(tmp_path / "one.npy", np.ones((1, 2), np.float32))
    with pytest.raises(TerminalError, match=r"has 2 inputs \(a, b\); use \.npz"):
        read_sample(tmp_path / "one.npy", inputs)


def test_images_feed_a_uint8_model_raw(tmp_path: Path) -> None:
    rgb = np.random.default_rng(0).integers(0, 256, (6, 8, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(tmp_path / "a.png")
    Image.fromarray(rgb).save(tmp_path / "b.bmp")
    Image.fromarray(rgb).save(tmp_path / "c.jpg", quality=95)
    samples = load_samples(tmp_path, UINT8_NHWC)
    assert [s.name for s in samples] == ["a.png", "b.bmp", "c.jpg"]
    np.testing.assert_array_equal(samples[0].feed["frame"], rgb[np.newaxis])
    np.testing.assert_array_equal(samples[1].feed["frame"], rgb[np.newaxis])
    assert samples[2].feed["frame"].shape == (1, 6, 8, 3) and samples[2].feed["frame"].dtype == np.uint8
    bgr = read_sample(tmp_path / "a.png", UINT8_NHWC, color="bgr").feed["frame"]
    np.testing.assert_array_equal(bgr[0], rgb[..., ::-1])
    nchw = read_sample(tmp_path / "a.png", [InputSpec("frame", (1, 3, 6, 8), "uint8")]).feed["frame"]
    np.testing.assert_array_equal(nchw[0], rgb.transpose(2, 0, 1))
    gray = read_sample(tmp_path / "a.png", [InputSpec("g", (1, 6, 8, 1), "uint8")]).feed["g"]
    assert gray.shape == (1, 6, 8, 1)


def test_model_metadata_names_the_channel_order(tmp_path: Path) -> None:
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["frame"], ["y"])],
        "g",
        [onnx.helper.make_tensor_value_info("frame", onnx.TensorProto.UINT8, [1, 6, 8, 3])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, [1, 6, 8, 3])],
    )
    model = onnx.helper.make_model(graph)
    onnx.helper.set_model_props(model, {"npuctl.color.frame": "bgr"})
    inputs = model_inputs(model)
    assert inputs == [InputSpec("frame", (1, 6, 8, 3), "uint8", "bgr")]
    rgb = np.random.default_rng(1).integers(0, 256, (6, 8, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(tmp_path / "a.png")
    np.testing.assert_array_equal(read_sample(tmp_path / "a.png", inputs).feed["frame"][0], rgb[..., ::-1])
    np.testing.assert_array_equal(read_sample(tmp_path / "a.png", inputs, color="rgb").feed["frame"][0], rgb)
    onnx.helper.set_model_props(model, {"npuctl.color.frame": "yuv"})
    with pytest.raises(TerminalError, match="expected rgb or bgr"):
        model_inputs(model)


def test_images_for_a_float_model_are_an_error(tmp_path: Path) -> None:
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "img.png")
    with pytest.raises(TerminalError, match=r"fold the preprocessing into the model .* or give \.npy/\.npz"):
        read_sample(tmp_path / "img.png", FLOAT_IN)


def test_image_of_the_wrong_size_is_an_error(tmp_path: Path) -> None:
    Image.fromarray(np.zeros((10, 20, 3), np.uint8)).save(tmp_path / "big.png")
    with pytest.raises(TerminalError, match=r"big\.png is 20x10, model input frame takes 8x6 frames"):
        read_sample(tmp_path / "big.png", UINT8_NHWC)


def test_labels(tmp_path: Path) -> None:
    folder = _npy_folder(tmp_path / "eval", 3)
    labels_file = tmp_path / "labels.txt"
    labels_file.write_text("# name label\n0000.npy 4\n0001.npy 7\n\n0002.npy 0\n")
    samples = load_samples(folder, FLOAT_IN)
    assert labels_for([s.name for s in samples], read_labels(labels_file)) == [4, 7, 0]
    labels_file.write_text("0000.npy 4\n0001.npy 7\n")
    with pytest.raises(TerminalError, match=r"no label for 1 samples: 0002\.npy"):
        labels_for([s.name for s in samples], read_labels(labels_file), "labels.txt")
    labels_file.write_text("0000.npy four\n")
    with pytest.raises(TerminalError, match=r"labels\.txt:1: expected"):
        read_labels(labels_file)
    labels_file.write_text("0000.npy 1\n0000.npy 2\n")
    with pytest.raises(TerminalError, match="labelled twice"):
        read_labels(labels_file)


def test_random_samples_are_seeded_and_typed() -> None:
    inputs = [
        InputSpec("x", (1, 3, 4, 4), "float32"),
        InputSpec("ids", (1, 5), "int64"),
        InputSpec("m", (2,), "uint8"),
    ]
    a, b = random_samples(inputs, 3, seed=1), random_samples(inputs, 5, seed=1)
    for left, right in zip(a, b[:3], strict=True):
        assert left.name == right.name
        for key in left.feed:
            np.testing.assert_array_equal(left.feed[key], right.feed[key])
    assert a[0].feed["x"].dtype == np.float32 and a[0].feed["ids"].dtype == np.int64
    assert not np.array_equal(a[0].feed["x"], a[1].feed["x"])
    assert not np.array_equal(a[0].feed["x"], random_samples(inputs, 1, seed=2)[0].feed["x"])


def test_model_inputs_exclude_initializers_and_need_static_shapes(tmp_path: Path) -> None:
    weight = onnx.numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [
            onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4]),
            onnx.helper.make_tensor_value_info("w", onnx.TensorProto.FLOAT, [4, 4]),
        ],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])],
        [weight],
    )
    model = onnx.helper.make_model(graph)
    assert model_inputs(model) == [InputSpec("x", (1, 4), "float32")]
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    with pytest.raises(TerminalError, match="dynamic dimensions"):
        model_inputs(model)


def test_feed_reader_is_an_ort_calibration_reader(tmp_path: Path) -> None:
    from onnxruntime.quantization import CalibrationDataReader

    folder = _npy_folder(tmp_path / "calib", 4)
    reader = FeedReader(lambda: iter_samples(folder, FLOAT_IN, count=3))
    assert isinstance(reader, CalibrationDataReader)
    first = [reader.get_next() for _ in range(4)]
    assert first[3] is None and all(f is not None for f in first[:3])
    reader.rewind()
    again = reader.get_next()
    assert again is not None and first[0] is not None
    np.testing.assert_array_equal(again["x"], first[0]["x"])
    assert len(list(reader)) == 3


def test_sample_set_reads_files_on_each_pass_not_before(tmp_path: Path) -> None:
    for i in range(3):
        np.save(tmp_path / f"{i}.npy", np.full((1, 3, 4, 4), i, np.float32))
    samples = sample_set(tmp_path, FLOAT_IN, role="evaluate.data")
    (tmp_path / "1.npy").write_bytes(b"not yet read")  # construction read no file
    assert len(samples) == 3 and samples.names == ["0.npy", "1.npy", "2.npy"]
    with pytest.raises(TerminalError, match=r"^evaluate\.data: 1\.npy: cannot read"):
        list(samples)
    np.save(tmp_path / "1.npy", np.full((1, 3, 4, 4), 7, np.float32))
    assert [float(s.feed["x"].max()) for s in samples] == [0.0, 7.0, 2.0]  # a second pass reads again


def test_a_scalar_in_an_npz_stays_a_scalar(tmp_path: Path) -> None:
    """A rank-0 input (a sample rate) is fed as shape [], not [1]: OpenVINO refuses [1] for it."""
    np.savez(tmp_path / "s.npz", x=np.zeros((1, 4), np.float32), sr=np.array(16000, np.int64))
    specs = [InputSpec("x", (1, 4), "float32"), InputSpec("sr", (), "int64")]
    feed = read_sample(tmp_path / "s.npz", specs).feed
    assert feed["sr"].shape == () and int(feed["sr"]) == 16000 and feed["x"].shape == (1, 4)


GRAY = [InputSpec("g", (1, 6, 8, 1), "uint8")]


def test_a_16_bit_png_is_scaled_to_8_bits_not_clipped(tmp_path: Path) -> None:
    wide = (np.arange(48, dtype=np.uint32).reshape(6, 8) * 1365).astype(np.uint16)  # 0 .. 64155
    Image.fromarray(wide).save(tmp_path / "deep.png")
    assert Image.open(tmp_path / "deep.png").mode.startswith("I;16")
    fed = read_sample(tmp_path / "deep.png", GRAY).feed["g"][0, ..., 0]
    expected = np.floor(wide.astype(np.float64) * 255 / 65535 + 0.5).astype(np.uint8)
    np.testing.assert_array_equal(fed, expected)
    assert (fed == 255).sum() == (expected == 255).sum() <= 1  # clipped, nearly all would read 255
    rgb = read_sample(tmp_path / "deep.png", UINT8_NHWC).feed["frame"][0]
    np.testing.assert_array_equal(rgb, np.repeat(expected[..., None], 3, axis=2))


def test_cmyk_and_palette_images_are_converted_to_the_channels_the_input_takes(tmp_path: Path) -> None:
    cmyk = Image.new("CMYK", (8, 6), (0, 255, 64, 0))
    cmyk.save(tmp_path / "print.jpg", quality=100)
    cyan, magenta, yellow = (np.asarray(Image.open(tmp_path / "print.jpg"))[0, 0, :3]).astype(int)
    fed = read_sample(tmp_path / "print.jpg", UINT8_NHWC).feed["frame"][0, 0, 0].astype(int)
    assert list(fed) == [255 - cyan, 255 - magenta, 255 - yellow]  # no black: 255 minus each ink
    palette = Image.new("P", (8, 6), 1)
    palette.putpalette([0, 0, 0, 10, 200, 30] + [0] * 762)
    palette.save(tmp_path / "indexed.png")
    assert Image.open(tmp_path / "indexed.png").mode == "P"
    assert list(read_sample(tmp_path / "indexed.png", UINT8_NHWC).feed["frame"][0, 3, 4]) == [10, 200, 30]
    luma = read_sample(tmp_path / "indexed.png", GRAY).feed["g"][0, 3, 4, 0]
    assert luma == round((10 * 299 + 200 * 587 + 30 * 114) / 1000)  # ITU-R 601, as Pillow's L


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_sample_value_is_an_error_naming_the_file_and_index(tmp_path: Path, bad: float) -> None:
    values = np.zeros((3, 4, 4), np.float32)
    values[1, 2, 3] = bad
    np.save(tmp_path / "0007.npy", values)
    with pytest.raises(TerminalError) as info:
        read_sample(tmp_path / "0007.npy", FLOAT_IN)
    assert str(info.value).startswith("0007.npy: array for input x holds 1 non-finite value(s)")
    assert "at index [0, 1, 2, 3]" in str(info.value)
    np.savez(tmp_path / "pair.npz", x=values)
    with pytest.raises(TerminalError, match=r"^pair\.npz: array for input x holds 1 non-finite"):
        read_sample(tmp_path / "pair.npz", FLOAT_IN)


def test_random_token_ids_stay_inside_the_embedding_they_index(tmp_path: Path) -> None:
    """An int64 input read (through a Cast) as Gather indices into a [32, 8] table: random feeds stay
    below 32, so the model runs on them (a BERT export's word embedding failed on id 85 before)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from backends.passes.data import model_inputs, random_samples

    table = numpy_helper.from_array(np.arange(32 * 8, dtype=np.float32).reshape(32, 8), "table")
    graph = helper.make_graph(
        [helper.make_node("Cast", ["ids"], ["ids32"], to=TensorProto.INT32),
         helper.make_node("Gather", ["table", "ids32"], ["emb"], axis=0)],
        "embed",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 40]),
         helper.make_tensor_value_info("lengths", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("emb", TensorProto.FLOAT, [1, 40, 8])],
        [table],
    )  # fmt: skip
    path = tmp_path / "embed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    specs = {s.name: s for s in model_inputs(path)}
    assert specs["ids"].index_bound == 32 and specs["lengths"].index_bound is None
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for sample in random_samples(list(specs.values()), 8, seed=0):
        assert int(sample.feed["ids"].max()) < 32
        session.run(None, sample.feed)


def test_random_feeds_of_a_tagger_pad_each_row_and_keep_ids_in_the_embedding() -> None:
    """khmersm's encoder: a boolean mask beside int64 ids of the same shape is a padding mask. Each
    random row is a run of true then a run of false, never all one value (all padding makes the float
    model NaN; either convention reads a mixed row as a padded sequence), and the outputs are finite."""
    from backends.passes.accuracy import run_model
    from tests.backends.tasks.task_models import segmenter

    model = segmenter(32)
    ids, mask = model_inputs(model)
    assert (ids.index_bound, ids.padding_mask) == (126, False) and mask.padding_mask
    samples = random_samples([ids, mask], 16, seed=0)
    lengths = set()
    for sample in samples:
        row = sample.feed["mask"][0]
        length = int(row.sum())
        assert 1 <= length <= 31 and row[:length].all() and not row[length:].any()
        lengths.add(length)
        assert sample.feed["x"].max() < 126
    assert len(lengths) > 4, "lengths vary"
    for outputs in run_model(model, samples).values:
        assert np.isfinite(outputs[0]).all()
    for inverted in (True, False):  # the same model behind a Not takes the other convention: still finite
        flipped = [
            {"x": s.feed["x"], "mask": ~s.feed["mask"] if inverted else s.feed["mask"]} for s in samples
        ]
        assert all(np.isfinite(o[0]).all() for o in run_model(model, flipped).values)
