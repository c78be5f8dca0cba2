"""The preprocess stage: the model takes the app's raw frame (uint8/float32, NHWC/NCHW, BGR/RGB/gray,
any size when resizing) and does the conversion to what it was trained on itself.

Canonical form (the spec): model input = (x - mean[c]) / std[c], x the raw 0-255 pixel after the color
conversion and the resize, mean/std in the model's channel order. When every consumer of the input is
a Conv (group 1, constant weights), the affine and the color conversion are folded into its weights:

    W'[o, r] = sum_c A[c, r] * W[o, c] / std[c]      (A: the channel map raw -> model, e.g. a swap)
    b'[o]    = b[o] - sum_{c,k} W[o, c, k] * mean[c] / std[c]

The bias form is exact only when the Conv pads nothing: its zero padding is zero in the *normalized*
space, i.e. `mean` in raw space, so with padding the mean stays a Sub (in raw channel order) and only
the std and the color map are folded. Cast/Transpose/Resize are real work and stay ops. The result is
verified against a NumPy implementation of the canonical form followed by the original model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from backends.passes.preprocess.plan import Plan, plan_for, random_raw, reference_input
from backends.sdk.base import StageOutput, StageRequest
from backends.sdk.errors import TerminalError

if TYPE_CHECKING:
    import numpy as np
    import onnx

TOLERANCE = 1e-4


def _dist(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "missing"


# ---------------------------------------------------------------- building the model


@dataclass
class Built:
    model: onnx.ModelProto
    folded: dict[str, Any]
    added_ops: list[str]


def _folded_text(folded: Mapping[str, Any]) -> str:
    """`{"color": True, "std": True, "mean": False, "convs": ["conv1"]}` -> words for the stage note."""
    parts = [name for name in ("color", "mean", "std") if folded.get(name)]
    convs = list(folded.get("convs") or [])
    if not parts:
        return "nothing folded into the weights"
    where = f"the weights of {', '.join(convs)}" if convs else "the weights"
    return f"{', '.join(parts)} folded into {where}"


def build(model: onnx.ModelProto, plan: Plan, fold: bool = True) -> Built:
    """The model with the raw input `plan.input` (same name) and the conversion prepended or folded."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    internal = f"{plan.input}/model_input"
    consumers = [n for n in g.node if plan.input in n.input]
    for n in consumers:
        for k, t in enumerate(n.input):
            if t == plan.input:
                n.input[k] = internal
    convs = _foldable_convs(out, consumers, plan) if fold else []
    prep = _Prep(plan, plan.input)
    folded: dict[str, Any] = {"color": False, "std": False, "mean": False, "convs": [c.name for c in convs]}
    x = prep.cast_and_layout()
    if convs:
        mean_exact = all(_zero_pads(c) for c in convs)
        raw_mean = _raw_mean(plan)
        fold_color = mean_exact or raw_mean is not None
        if not fold_color:
            x = prep.color(x)
        x = prep.resize(x, plan.raw_channels if fold_color else plan.model_shape[1])
        a = _numpy_map(plan) if fold_color else None
        if not mean_exact:
            m = raw_mean if fold_color else plan.mean
            assert m is not None
            x = prep.sub_mean(x, m)
        for conv in convs:
            _fold_into_conv(out, conv, plan, a, fold_mean=mean_exact)
        folded.update(
            color=fold_color and plan.channel_map != _identity(len(plan.channel_map)),
            std=True,
            mean=mean_exact,
        )
    else:
        x = prep.color(x)
        x = prep.resize(x, plan.model_shape[1])
        x = prep.normalize(x)
    if x == plan.input:  # everything folded: the consumers read the raw input itself
        for n in consumers:
            for k, t in enumerate(n.input):
                if t == internal:
                    n.input[k] = plan.input
    else:
        prep.finish(x, internal)
    for node in reversed(prep.nodes):
        g.node.insert(0, node)
    g.initializer.extend(prep.inits)
    vi = next(v for v in g.input if v.name == plan.input)
    vi.type.tensor_type.elem_type = 2 if plan.dtype == "uint8" else 1
    del vi.type.tensor_type.shape.dim[:]
    for d in plan.raw_shape:
        dim = vi.type.tensor_type.shape.dim.add()
        if isinstance(d, int):
            dim.dim_value = d
        else:
            dim.dim_param = d
    del g.value_info[:]
    return Built(out, folded, [n.op_type for n in prep.nodes])


def _identity(n: int) -> list[list[float]]:
    return [[1.0 if i == j else 0.0 for j in range(n)] for i in range(n)]


def _numpy_map(plan: Plan) -> np.ndarray:
    import numpy as np

    return np.asarray(plan.channel_map, np.float64)


def _raw_mean(plan: Plan) -> list[float] | None:
    """Raw-space means r with A @ r == mean, or None when no exact one exists (gray -> rgb, unequal means)."""
    import numpy as np

    a = _numpy_map(plan)
    mean = np.asarray(plan.mean, np.float64)
    r, *_ = np.linalg.lstsq(a, mean, rcond=None)
    if a.shape[0] == 1:  # rgb -> gray: the luma weights sum to 1, so subtract the mean from every channel
        r = np.full(a.shape[1], mean[0])
    if not np.allclose(a @ r, mean, atol=1e-9):
        return None
    return [float(v) for v in r]


def _zero_pads(conv: onnx.NodeProto) -> bool:
    from onnx import helper

    attrs = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    return auto in ("NOTSET", "VALID") and not any(int(p) for p in attrs.get("pads", []))


def _const_tensor(model: onnx.ModelProto, name: str) -> onnx.TensorProto | None:
    """The initializer named `name`, or the `value` tensor of the Constant node producing it (editable)."""
    for t in model.graph.initializer:
        if t.name == name:
            return t
    inits = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:
        if n.output and n.output[0] == name and n.op_type == "Constant":
            return n.attribute[0].t if n.attribute and n.attribute[0].name == "value" else None
        if n.output and n.output[0] == name and n.op_type == "ConstantOfShape" and n.input[0] in inits:
            return _materialize(n, inits[n.input[0]])
    return None


def _materialize(node: onnx.NodeProto, shape: onnx.TensorProto) -> onnx.TensorProto:
    """Turns a ConstantOfShape (with constant shape) into a Constant holding the full tensor, in place,
    so the node count stays the same; returns the editable tensor."""
    import numpy as np
    from onnx import helper, numpy_helper

    fill = numpy_helper.to_array(node.attribute[0].t) if node.attribute else np.zeros(1, np.float32)
    value = np.full(tuple(int(d) for d in numpy_helper.to_array(shape)), fill.reshape(-1)[0], fill.dtype)
    tensor = numpy_helper.from_array(value, node.output[0])
    constant = helper.make_node("Constant", [], [node.output[0]], name=node.name, value=tensor)
    node.CopyFrom(constant)
    return node.attribute[0].t


def _foldable_convs(
    model: onnx.ModelProto, consumers: list[onnx.NodeProto], plan: Plan
) -> list[onnx.NodeProto]:
    from onnx import helper

    ok = []
    for n in consumers:
        group = next((helper.get_attribute_value(a) for a in n.attribute if a.name == "group"), 1)
        if (
            n.op_type != "Conv"
            or n.domain not in ("", "ai.onnx")
            or n.input[0] != f"{plan.input}/model_input"
        ):
            return []
        params = [t for t in n.input[1:3] if t]
        if int(group) != 1 or any(_const_tensor(model, t) is None for t in params):
            return []
        if any(sum(1 for m in model.graph.node for u in m.input if u == t) != 1 for t in params):
            return []  # weights shared with another node cannot be changed for this one only
        ok.append(n)
    return ok


def _fold_into_conv(
    model: onnx.ModelProto, conv: onnx.NodeProto, plan: Plan, a: np.ndarray | None, fold_mean: bool
) -> None:
    import numpy as np
    from onnx import numpy_helper

    w_t = _const_tensor(model, conv.input[1])
    assert w_t is not None
    w = numpy_helper.to_array(w_t).astype(np.float64)
    std = np.asarray(plan.std, np.float64)
    mean = np.asarray(plan.mean, np.float64)
    ws = w / std.reshape(1, -1, *([1] * (w.ndim - 2)))
    bias = np.zeros(w.shape[0])
    b_t = _const_tensor(model, conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
    if b_t is not None:
        bias = numpy_helper.to_array(b_t).astype(np.float64)
    if fold_mean:
        bias = bias - np.einsum("ock,c->o", ws.reshape(w.shape[0], w.shape[1], -1), mean)
    new_w = np.einsum("oc...,cr->or...", ws, a) if a is not None else ws
    w_t.CopyFrom(numpy_helper.from_array(new_w.astype(np.float32), w_t.name))
    if fold_mean:
        if b_t is not None:
            b_t.CopyFrom(numpy_helper.from_array(bias.astype(np.float32), b_t.name))
        else:
            name = f"{conv.name or conv.output[0]}/preprocess_bias"
            model.graph.initializer.append(numpy_helper.from_array(bias.astype(np.float32), name))
            while len(conv.input) < 3:
                conv.input.append("")
            conv.input[2] = name


class _Prep:
    """Accumulates the prepended nodes and constants."""

    def __init__(self, plan: Plan, raw: str) -> None:
        self.plan, self.raw = plan, raw
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def _name(self, what: str) -> str:
        return f"{self.plan.input}/preprocess/{what}"

    def _node(self, op: str, inputs: list[str], what: str, **attrs: Any) -> str:
        from onnx import helper

        out = self._name(what)
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def _const(self, what: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self._name(what)
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def cast_and_layout(self) -> str:
        x = self.raw
        if self.plan.dtype == "uint8":
            x = self._node("Cast", [x], "cast", to=1)
        if self.plan.layout == "nhwc":
            x = self._node("Transpose", [x], "nchw", perm=[0, 3, 1, 2])
        return x

    def color(self, x: str) -> str:
        import numpy as np

        a = _numpy_map(self.plan)
        if a.shape[0] == a.shape[1] and np.allclose(a, np.eye(a.shape[0])):
            return x
        if a.shape[1] == 1:
            return self._node("Concat", [x] * a.shape[0], "gray_to_color", axis=1)
        if a.shape[0] == a.shape[1]:
            order = [int(np.argmax(row)) for row in a]
            return self._node(
                "Gather", [x, self._const("channel_order", np.asarray(order, np.int64))], "swap", axis=1
            )
        weights = a.reshape(a.shape[0], a.shape[1], 1, 1).astype(np.float32)
        return self._node("Conv", [x, self._const("luma", weights)], "to_gray", kernel_shape=[1, 1])

    def resize(self, x: str, channels: int) -> str:
        import numpy as np

        if self.plan.resize_mode is None:
            return x
        n, _, h, w = self.plan.model_shape
        sizes = self._const("sizes", np.asarray([n, channels, h, w], np.int64))
        return self._node("Resize", [x, "", "", sizes], "resize", mode=self.plan.resize_mode)

    def sub_mean(self, x: str, mean: Sequence[float]) -> str:
        import numpy as np

        value = np.asarray(mean, np.float32).reshape(1, -1, 1, 1)
        if len(set(mean)) == 1:
            value = np.asarray(mean[0], np.float32)
        return self._node("Sub", [x, self._const("mean", value)], "sub_mean")

    def normalize(self, x: str) -> str:
        import numpy as np

        if any(m != 0.0 for m in self.plan.mean):
            x = self.sub_mean(x, self.plan.mean)
        if any(s != 1.0 for s in self.plan.std):
            std = np.asarray(self.plan.std, np.float32).reshape(1, -1, 1, 1)
            x = self._node("Div", [x, self._const("std", std)], "div_std")
        return x

    def finish(self, x: str, internal: str) -> None:
        """Makes the last prepended node write the tensor the model's consumers now read."""
        last = self.nodes[-1]
        assert last.output[0] == x
        last.output[0] = internal


# ---------------------------------------------------------------- verification and the stage


def verify(original: onnx.ModelProto, built: onnx.ModelProto, plan: Plan, raw: np.ndarray) -> float:
    """Max abs difference between the built model on `raw` and NumPy preprocessing + the original model."""
    import numpy as np

    from backends.passes.rewrite.verify import random_feeds, run_model

    feeds = random_feeds(original)
    feeds[plan.input] = reference_input(plan, raw)
    expected = run_model(original, feeds)
    feeds[plan.input] = raw
    got = run_model(built, feeds)
    return max(
        float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        for a, b in zip(expected, got, strict=False)
    )


def preprocess_model(
    model: onnx.ModelProto, pre: Mapping[str, Any], fold: bool = True
) -> tuple[Built, Plan, float]:
    """Folded when possible; verified on a seeded raw frame; falls back to explicit ops if folding drifts."""
    plan = plan_for(model, pre)
    raw = random_raw(plan)
    built = build(model, plan, fold=fold)
    diff = verify(model, built.model, plan, raw)
    if diff > TOLERANCE and fold:
        built = build(model, plan, fold=False)
        diff = verify(model, built.model, plan, raw)
    if diff > TOLERANCE:
        raise TerminalError(
            f"preprocess: the model with preprocessing differs from the NumPy reference by {diff:g}"
        )
    return built, plan, diff


class PreprocessPass:
    """Stage "preprocess": config keys `preprocess`, `inputs`; input `model`."""

    stage = "preprocess"

    def fingerprint(self) -> dict[str, str]:
        return {"onnx": _dist("onnx"), "onnxruntime": _dist("onnxruntime"), "numpy": _dist("numpy")}

    def run(self, request: StageRequest) -> StageOutput:
        import onnx

        from backends.passes.preprocess import forms as F

        pre = request.config.get("preprocess")
        if not isinstance(pre, Mapping):
            raise TerminalError("preprocess: the stage runs only with a preprocess section")
        model = onnx.load(str(request.inputs["model"]))
        built, plan, diff = preprocess_model(model, pre)
        path = request.workdir / "model.onnx"
        path.write_bytes(built.model.SerializeToString(deterministic=True))
        _, _, h, w = plan.model_shape
        raw_h, raw_w = plan.raw_hw
        forms = F.all_forms(
            F.canonical(pre, plan.model_shape[1]),
            raw_h if isinstance(raw_h, int) else h,
            raw_w if isinstance(raw_w, int) else w,
            pre.get("resize"),
        )
        request.log.parent.mkdir(parents=True, exist_ok=True)
        request.log.write_text(
            f"added ops: {built.added_ops}\nfolded: {built.folded}\nmax abs diff: {diff:g}\n"
        )
        report = {
            "input": {
                "name": plan.input,
                "shape": plan.raw_shape,
                "dtype": plan.dtype,
                "layout": plan.layout,
            },
            "folded": built.folded,
            "added_ops": built.added_ops,
            "verified_max_abs_diff": float(f"{diff:.3g}"),
            "forms": forms,
        }
        note = f"raw {plan.dtype} {plan.layout} input; {len(built.added_ops)} ops added; {_folded_text(built.folded)}"
        return StageOutput(artifacts={"model": path}, report=report, note=note)
