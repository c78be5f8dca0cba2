"""A token tagger shaped as `torch.onnx.export` writes a PyTorch `nn.TransformerEncoder` (opset 14,
post-norm layers, GELU feed-forward) behind an embedding, with int64 token ids and a boolean padding mask.

No wheel here ships such a model, so the graph is written node for node as the exporter spells it:
LayerNorm decomposed into ReduceMean/Sub/Pow/Sqrt/Div (LayerNormalization is opset 17), GELU as
0.5 * x * (1 + Erf(x / sqrt 2)), attention as MatMul/Reshape/Transpose/Softmax with the mask turned into
an additive -inf bias by Where. The mask is `attention_mask` (true = a real token), as a wrapper that
passes `~attention_mask` as `src_key_padding_mask` exports it: an all-false mask masks every key, and
the float model's softmax then outputs NaN, as the real export does. Weights are seeded random (the
rewrites are checked against the float model, not against a task).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEQ, DIM, HEADS, FF, LAYERS, VOCAB, CLASSES = 32, 64, 4, 128, 2, 100, 2


class _Graph:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def const(self, value: np.ndarray, hint: str) -> str:
        name = f"{hint}_{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def weight(self, *shape: int) -> str:
        return self.const((self.rng.standard_normal(shape) / math.sqrt(shape[0])).astype(np.float32), "w")

    def op(self, op_type: str, inputs: list[str], **attrs: object) -> str:
        self.count += 1
        out = f"/{op_type}_{self.count}_output_0"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"/{op_type}_{self.count}", **attrs))
        return out

    def scalar(self, value: float) -> str:
        return self.const(np.asarray(value, np.float32), "c")

    def linear(self, x: str, n_in: int, n_out: int) -> str:
        y = self.op("MatMul", [x, self.weight(n_in, n_out)])
        return self.op(
            "Add", [self.const((0.01 * self.rng.standard_normal(n_out)).astype(np.float32), "b"), y]
        )

    def layer_norm(self, x: str) -> str:
        mean = self.op("ReduceMean", [x], axes=[-1], keepdims=1)
        centred = self.op("Sub", [x, mean])
        var = self.op("ReduceMean", [self.op("Pow", [centred, self.scalar(2.0)])], axes=[-1], keepdims=1)
        std = self.op("Sqrt", [self.op("Add", [var, self.scalar(1e-5)])])
        normed = self.op("Div", [centred, std])
        gamma = self.const((1 + 0.1 * self.rng.standard_normal(DIM)).astype(np.float32), "gamma")
        beta = self.const((0.1 * self.rng.standard_normal(DIM)).astype(np.float32), "beta")
        return self.op("Add", [self.op("Mul", [normed, gamma]), beta])

    def gelu(self, x: str) -> str:
        erf = self.op("Erf", [self.op("Div", [x, self.scalar(math.sqrt(2.0))])])
        return self.op(
            "Mul", [self.op("Mul", [x, self.op("Add", [erf, self.scalar(1.0)])]), self.scalar(0.5)]
        )

    def heads(self, x: str, perm: list[int]) -> str:
        shape = self.const(np.asarray([1, SEQ, HEADS, DIM // HEADS], np.int64), "shape")
        return self.op("Transpose", [self.op("Reshape", [x, shape])], perm=perm)

    def attention(self, x: str, bias: str) -> str:
        q = self.heads(self.linear(x, DIM, DIM), [0, 2, 1, 3])
        k = self.heads(self.linear(x, DIM, DIM), [0, 2, 3, 1])
        v = self.heads(self.linear(x, DIM, DIM), [0, 2, 1, 3])
        scores = self.op("Div", [self.op("MatMul", [q, k]), self.scalar(math.sqrt(DIM // HEADS))])
        weights = self.op("Softmax", [self.op("Add", [scores, bias])], axis=-1)
        context = self.op("Transpose", [self.op("MatMul", [weights, v])], perm=[0, 2, 1, 3])
        merged = self.op("Reshape", [context, self.const(np.asarray([1, SEQ, DIM], np.int64), "shape")])
        return self.linear(merged, DIM, DIM)

    def layer(self, x: str, bias: str) -> str:
        x = self.layer_norm(self.op("Add", [x, self.attention(x, bias)]))
        ff = self.linear(self.gelu(self.linear(x, DIM, FF)), FF, DIM)
        return self.layer_norm(self.op("Add", [x, ff]))


def encoder(seed: int = 0) -> onnx.ModelProto:
    """The tagger: `input_ids` int64 [1, 32] and `attention_mask` bool [1, 32] -> `logits` [1, 32, 2]."""
    g = _Graph(seed)
    table = g.const((0.5 * g.rng.standard_normal((VOCAB, DIM))).astype(np.float32), "embedding")
    x = g.op("Gather", [table, "input_ids"], axis=0)
    x = g.op("Add", [x, g.const((0.1 * g.rng.standard_normal((1, SEQ, DIM))).astype(np.float32), "pos")])
    padded = g.op("Not", ["attention_mask"])
    bias = g.op(
        "Where",
        [
            padded,
            g.const(np.asarray(-np.inf, np.float32), "ninf"),
            g.const(np.asarray(0.0, np.float32), "zero"),
        ],
    )
    bias = g.op("Unsqueeze", [bias, g.const(np.asarray([1, 2], np.int64), "axes")])
    for _ in range(LAYERS):
        x = g.layer(x, bias)
    logits = g.linear(x, DIM, CLASSES)
    g.nodes.append(helper.make_node("Identity", [logits], ["logits"], name="/output"))
    graph = helper.make_graph(
        g.nodes,
        "transformer_encoder_tagger",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, SEQ]),
            helper.make_tensor_value_info("attention_mask", TensorProto.BOOL, [1, SEQ]),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, SEQ, CLASSES])],
        g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], producer_name="pytorch")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def token_feeds(count: int, seed: int = 1) -> list[dict[str, np.ndarray]]:
    """Sentences of 8-32 random tokens, padded to 32 (id 0, mask false)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        length = int(rng.integers(8, SEQ + 1))
        ids = np.zeros((1, SEQ), np.int64)
        ids[0, :length] = rng.integers(1, VOCAB, length)
        mask = np.zeros((1, SEQ), np.bool_)
        mask[0, :length] = True
        out.append({"input_ids": ids, "attention_mask": mask})
    return out
