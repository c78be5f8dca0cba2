"""Resize and Pad forms.

Nearest-neighbour Resize by an integer factor picks the same source pixel under `asymmetric`/`floor` and
`half_pixel`/`round_prefer_floor` (for scale s, (d + 0.5) / s - 0.5 lies within 0.5 of floor(d / s)), so
a model exported with one coordinate mode runs on an NPU that only implements the other. A zero Pad
before a Conv is the Conv's own padding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from backends.passes.rewrite.rules import Context, Match, Rewrite

if TYPE_CHECKING:
    import onnx

_FORMS = {
    ("asymmetric", "floor"): ("half_pixel", "round_prefer_floor"),
    ("half_pixel", "round_prefer_floor"): ("asymmetric", "floor"),
}


def _integer_upscale(ctx: Context, i: int) -> bool:
    node = ctx.nodes[i]
    a, b = ctx.facts.static_shape(node.input[0]), ctx.facts.static_shape(node.output[0])
    if a is None or b is None or len(a) != len(b):
        return False
    return all(y % x == 0 and y >= x for x, y in zip(a, b, strict=False))


class ResizeNearestMode(Rewrite):
    """Nearest Resize with integer factors: asymmetric/floor <-> half_pixel/round_prefer_floor."""

    name = "resize_nearest_coordinates"
    family = "Resize"

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("Resize"):
            node = ctx.nodes[i]
            key = (
                str(ctx.attr(i, "coordinate_transformation_mode", "half_pixel")),
                str(ctx.attr(i, "nearest_mode", "round_prefer_floor")),
            )
            if (
                ctx.attr(i, "mode", "nearest") != "nearest"
                or key not in _FORMS
                or not _integer_upscale(ctx, i)
            ):
                continue
            coord, nearest = _FORMS[key]
            attrs = {a.name: _value(a) for a in node.attribute}
            attrs.update(coordinate_transformation_mode=coord, nearest_mode=nearest)
            m = Match(self.name, ctx.facts.names[i], [i])
            ctx.node(m, "Resize", list(node.input), list(node.output), **attrs)
            out.append(m)
        return out


class PadIntoConv(Rewrite):
    """Pad(constant 0, spatial axes only) -> the following Conv's pads."""

    name = "pad_into_conv"
    family = "Pad"

    def find(self, ctx: Context) -> list[Match]:
        out = []
        for i in ctx.runtime("Pad"):
            node = ctx.nodes[i]
            if ctx.attr(i, "mode", "constant") != "constant":
                continue
            pads = ctx.facts.value(node.input[1]) if len(node.input) > 1 else None
            value = ctx.scalar(node.input[2]) if len(node.input) > 2 and node.input[2] else 0.0
            rank = ctx.facts.rank(node.input[0])
            conv = ctx.only_consumer(node.output[0])
            if (
                pads is None
                or value != 0.0
                or rank is None
                or conv is None
                or ctx.nodes[conv].op_type != "Conv"
            ):
                continue
            if len(node.input) > 3 and node.input[3]:
                continue
            p = [int(x) for x in pads.reshape(-1)]
            begin, end = p[:rank], p[rank:]
            if any(x < 0 for x in p) or any(begin[:2]) or any(end[:2]):
                continue
            if ctx.nodes[conv].input[0] != node.output[0] or ctx.attr(conv, "auto_pad", "NOTSET") != "NOTSET":
                continue
            spatial = rank - 2
            old = list(ctx.attr(conv, "pads", [0] * 2 * spatial))
            new = [old[k] + begin[2 + k] for k in range(spatial)] + [
                old[spatial + k] + end[2 + k] for k in range(spatial)
            ]
            attrs = {a.name: _value(a) for a in ctx.nodes[conv].attribute}
            attrs["pads"] = new
            m = Match(self.name, ctx.facts.names[i], [i, conv])
            ctx.node(
                m, "Conv", [node.input[0], *ctx.nodes[conv].input[1:]], list(ctx.nodes[conv].output), **attrs
            )
            out.append(m)
        return out


def _value(attr: onnx.AttributeProto) -> object:
    from onnx import helper

    value = helper.get_attribute_value(attr)
    return value.decode() if isinstance(value, bytes) else value


REWRITES: list[Rewrite] = [ResizeNearestMode(), PadIntoConv()]
