"""The import stage's shapes on real exports: every tensor static once the inputs are fixed, whatever
shape subgraphs the exporter wrote (a PyTorch transformer's, a tf2onnx BERT's Shape of a weight) and
whatever output shape it declared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx

from backends.passes.importer import import_model
from tests.backends.tasks.task_models import ddddocr_model, segmenter, wheel_file

G2P = "g2p-id-py==0.4.2"


def _bert() -> Path:
    """g2p-id-py's BERT masked-language model (tf2onnx, int64 ids [batch, 32], Apache-2.0)."""
    return wheel_file(G2P, "g2p_id", "models/bert/bert_mlm.onnx", ("models/bert/bert_mlm.onnx",))


def _dims(value: Any) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in value.type.tensor_type.shape.dim]


def _symbolic(model: onnx.ModelProto) -> list[str]:
    values = [*model.graph.value_info, *model.graph.output]
    return [v.name for v in values if not all(isinstance(d, int) and d > 0 for d in _dims(v))]


def test_a_transformer_encoder_at_fixed_inputs_has_every_tensor_static() -> None:
    model, _ = import_model(segmenter(), {"x": [1, 32], "mask": [1, 32]}, log=lambda _: None)
    assert _symbolic(model) == []
    assert [_dims(o) for o in model.graph.output] == [[1, 32, 2]]


def test_a_bert_export_s_shape_of_a_weight_is_resolved(tmp_path: Path) -> None:
    source = onnx.load(str(_bert()))
    before = onnx.shape_inference.infer_shapes(source)
    assert _symbolic(before), "the export itself leaves shapes symbolic (else this test shows nothing)"
    model, _ = import_model(_bert(), {"input_1": [1, 32]}, log=lambda _: None)
    assert _symbolic(model) == []
    # and the QNN HTP validates the whole graph (a symbolic inner tensor fails it: "Dynamic shape")
    from backends.qnn import driver

    onnx.save(model, str(tmp_path / "model.onnx"))
    answer = driver.call(
        {"mode": "validate", "model": "model.onnx", "htp_arch": "75", "soc_model": "57"},
        tmp_path,
        tmp_path / "native.log",
    )
    assert "QNNExecutionProvider" in answer["providers"]


def test_an_exporters_wrong_output_rank_gives_way_to_the_shape_it_computes() -> None:
    """ddddocr's recognizer declares its output [1, seqlen]; the graph makes [T, 1, C]."""
    path = ddddocr_model("common.onnx")
    source = onnx.load(str(path), load_external_data=False)
    assert [len(o.type.tensor_type.shape.dim) for o in source.graph.output] == [2]
    model, _ = import_model(path, {"input1": [1, 1, 64, 256]}, log=lambda _: None)
    (output,) = model.graph.output
    dims = _dims(output)
    assert _symbolic(model) == []
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {"input1": np.zeros((1, 1, 64, 256), np.float32)})
    assert dims == list(out.shape)
