"""The TFLite operators mapped back to ONNX nodes through one-to-one anchors."""

from __future__ import annotations

from backends.mediatek.account import CPU, NPU, Operator, cpu_runs, onnx_devices


def _op(k: int, op: str, device: str) -> Operator:
    return Operator(k, op, device, "yes" if device == NPU else "missing")


def test_nodes_between_anchors_run_where_the_operators_between_them_run() -> None:
    nodes = [
        ("c1", "Conv"),
        ("bn", "BatchNormalization"),
        ("hs", "HardSigmoid"),
        ("c2", "Conv"),
        ("r", "Relu"),
    ]
    placed = [_op(0, "CONV_2D", NPU), _op(1, "RELU_0_TO_1", CPU), _op(2, "PAD", CPU), _op(3, "CONV_2D", NPU)]
    devices = onnx_devices(nodes, placed)
    # HardSigmoid is an anchor (RELU_0_TO_1, off the MDLA); the pad split off c2 is c2's own
    assert devices == {"c1": NPU, "hs": CPU, "c2": NPU, "bn": NPU, "r": NPU}
    assert cpu_runs(placed) == 1


def test_no_mapping_when_the_anchor_counts_differ() -> None:
    assert onnx_devices([("c1", "Conv"), ("c2", "Conv")], [_op(0, "CONV_2D", NPU)]) == {}
