"""ONNX's LSTM for onnx2torch, which has no converter for it: loaded by worker.py inside the coreml venv
before a model is converted (standard library, torch, onnx2torch).

A layer of constant weights without peepholes runs as torch's own LSTM, which coremltools converts
to one `lstm` operation. Otherwise the cell is written out in torch ops (ONNX's gate order i, o, f, c;
its default activations, sigmoid and tanh; peepholes; forward, reverse and bidirectional; layout 0
and 1), so the weights may be initializers or tensors the graph computes, and torch.jit.trace unrolls
the time loop over the model's fixed sequence length: coremltools converts the matmuls and
activations it is made of. What ONNX's LSTM allows beyond that (other activations, `clip`,
`input_forget`, a `sequence_lens` shorter than the sequence) is refused with the attribute's name,
not converted approximately.
"""

from __future__ import annotations

from typing import Any

import torch
from onnx2torch.node_converters.registry import add_converter
from onnx2torch.onnx_graph import OnnxGraph
from onnx2torch.onnx_node import OnnxNode
from onnx2torch.utils.common import OnnxMapping, OnnxToTorchModule, OperationConverterResult
from torch import nn

INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")
"""ONNX LSTM's inputs, in order."""


class OnnxLstm(nn.Module, OnnxToTorchModule):
    """One ONNX LSTM node: `fed` names the inputs forward receives (in order), `constants` holds the
    ones that are initializers."""

    def __init__(
        self,
        hidden: int,
        direction: str,
        layout: int,
        fed: list[str],
        constants: dict[str, Any],
        outputs: int,
        length: int | None = None,
    ) -> None:
        super().__init__()
        self.hidden, self.reverse_only, self.layout = hidden, direction == "reverse", layout
        self.length = length
        self.directions = 2 if direction == "bidirectional" else 1
        self.fed, self.outputs = fed, outputs
        for name, value in constants.items():
            self.register_buffer(name, value)

    def forward(self, *args: torch.Tensor) -> Any:
        values = dict(zip(self.fed, args, strict=True))
        for name, value in self.named_buffers():
            values[name] = value
        x = values["X"]
        if self.layout == 1:
            x = x.transpose(0, 1)  # [seq, batch, input]
        steps, batch = x.shape[0], x.shape[1]
        if self.length is not None and self.length != steps:
            raise NotImplementedError(f"LSTM sequence_lens {self.length} is not the sequence's {steps}")
        hidden = self.hidden
        zeros = torch.zeros(self.directions, batch, hidden, dtype=x.dtype)
        bias = values.get("B")
        h0, c0 = values.get("initial_h", zeros), values.get("initial_c", zeros)
        peep = values.get("P")
        if self._native(values):
            y, y_h, y_c = self._torch_lstm(x, values, h0, c0)
            if self.layout == 1:
                y, y_h, y_c = y.permute(2, 0, 1, 3), y_h.transpose(0, 1), y_c.transpose(0, 1)
            found = (y, y_h, y_c)[: self.outputs]
            return found[0] if self.outputs == 1 else found
        ys, hs, cs = [], [], []
        for d in range(self.directions):
            w, r = values["W"][d], values["R"][d]
            wb = bias[d][: 4 * hidden] if bias is not None else None
            rb = bias[d][4 * hidden :] if bias is not None else None
            xw = x @ w.transpose(0, 1)  # every step's input projection at once
            if wb is not None:
                xw = xw + wb
            h, c = h0[d], c0[d]
            order = range(steps - 1, -1, -1) if self.reverse_only or d == 1 else range(steps)
            out: list[torch.Tensor] = [h] * steps
            for t in order:
                gates = xw[t] + h @ r.transpose(0, 1)
                if rb is not None:
                    gates = gates + rb
                i, o, f, g = gates.chunk(4, -1)
                if peep is not None:
                    pi, po, pf = peep[d].chunk(3, -1)
                    i, f = i + pi * c, f + pf * c
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                if peep is not None:
                    o = o + po * c
                h = torch.sigmoid(o) * torch.tanh(c)
                out[t] = h
            ys.append(torch.stack(out))
            hs.append(h)
            cs.append(c)
        y, y_h, y_c = torch.stack(ys, 1), torch.stack(hs), torch.stack(cs)  # [seq, dirs, batch, H]
        if self.layout == 1:
            y, y_h, y_c = y.permute(2, 0, 1, 3), y_h.transpose(0, 1), y_c.transpose(0, 1)
        found = (y, y_h, y_c)[: self.outputs]
        return found[0] if self.outputs == 1 else found  # onnx2torch maps one output to a tensor

    def _native(self, values: dict[str, torch.Tensor]) -> bool:
        """torch's own LSTM takes this node: constant weights (coremltools reads aten::lstm's weights
        as constants) and no peepholes (aten::lstm has none)."""
        constant = {name for name, _ in self.named_buffers()}
        return "P" not in values and {"W", "R"} <= constant and ("B" not in values or "B" in constant)

    def _torch_lstm(
        self, x: torch.Tensor, values: dict[str, torch.Tensor], h0: torch.Tensor, c0: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """aten::lstm on ONNX's weights (gates i, o, f, c reordered to torch's i, f, c, o), which
        coremltools converts to its one `lstm` operation; the cell traced in torch ops grows by a
        dozen operations a step, and the conversion with it. A reverse-only layer runs forward on
        the reversed sequence. Returns Y [seq, dirs, batch, H], Y_h and Y_c [dirs, batch, H]."""
        hidden, dirs = self.hidden, self.directions
        order = torch.cat([torch.arange(k * hidden, (k + 1) * hidden) for k in (0, 2, 3, 1)])
        bias = values.get("B")
        params: list[torch.Tensor] = []
        for d in range(dirs):
            params += [values["W"][d][order], values["R"][d][order]]
            if bias is None:
                params += [torch.zeros(4 * hidden, dtype=x.dtype)] * 2
            else:
                params += [bias[d][: 4 * hidden][order], bias[d][4 * hidden :][order]]
        if self.reverse_only:
            x = x.flip(0)
        y, y_h, y_c = torch._VF.lstm(x, (h0, c0), params, True, 1, 0.0, False, dirs == 2, False)
        if self.reverse_only:
            y = y.flip(0)
        y = y.view(y.shape[0], y.shape[1], dirs, hidden).transpose(1, 2)
        return y, y_h, y_c


def _refuse(node: OnnxNode, graph: OnnxGraph) -> str | None:
    """Why this LSTM is not converted, or None."""
    attrs = node.attributes
    acts = [a.decode() if isinstance(a, bytes) else str(a) for a in attrs.get("activations", [])]
    if acts and [a.lower() for a in acts] != ["sigmoid", "tanh", "tanh"] * (len(acts) // 3):
        return f"activations {acts} (only sigmoid, tanh, tanh)"
    if attrs.get("clip") is not None:
        return "clip"
    if attrs.get("input_forget", 0):
        return "input_forget"
    lens = dict(zip(INPUTS, node.input_values, strict=False)).get("sequence_lens")
    if lens:
        if lens not in graph.initializers:
            return "sequence_lens computed by the graph"
        given = graph.initializers[lens].to_torch()
        if given.numel() and int(given.min()) != int(given.max()):
            return "sequence_lens of different lengths"
    return None


def _length(node: OnnxNode, graph: OnnxGraph) -> int | None:
    """The one length a constant sequence_lens gives, checked against the sequence when traced."""
    lens = dict(zip(INPUTS, node.input_values, strict=False)).get("sequence_lens")
    if not lens:
        return None
    given = graph.initializers[lens].to_torch()
    return int(given.max()) if given.numel() else None


def _convert(node: OnnxNode, graph: OnnxGraph) -> OperationConverterResult:
    why = _refuse(node, graph)
    if why is not None:
        raise NotImplementedError(f"LSTM {node.name!r}: {why} is not converted")
    attrs = node.attributes
    direction = attrs.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else str(direction)
    fed, constants = [], {}
    for name, value in zip(INPUTS, node.input_values, strict=False):
        if not value or name == "sequence_lens":  # absent, or equal to the sequence (checked above)
            continue
        if value in graph.initializers:
            constants[name] = graph.initializers[value].to_torch()
        else:
            fed.append(name)
    inputs = tuple(dict(zip(INPUTS, node.input_values, strict=False))[name] for name in fed)
    module = OnnxLstm(
        int(attrs["hidden_size"]),
        direction,
        int(attrs.get("layout", 0)),
        fed,
        constants,
        len(node.output_values),
        _length(node, graph),
    )
    return OperationConverterResult(module, OnnxMapping(inputs=inputs, outputs=node.output_values))


for _version in (1, 7, 14):
    add_converter(operation_type="LSTM", version=_version)(_convert)
