"""The guess of a sequence tagger: integer token ids [N, T] (an input the graph reads as Gather indices
into an embedding), per-token class scores [N, T, C], and maybe a padding mask [N, T] beside the ids.

Which mask value marks padding is decided by running the model, not from names or op patterns: with
the mask marking the second half of the sequence as padding in one convention, the ids there are
changed; in the model's own convention the first half's scores do not move (a padded key is not
attended to), in the other they do. A mask whose value moves nothing, or every position either way,
is no padding mask the guess can tell.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

Dims = tuple[int | None, ...]

_BOOL = 9
_INTS = frozenset({6, 7})  # INT32, INT64


def input_dims(proto: Any, inputs: Mapping[str, Sequence[int | None]] | None) -> dict[str, Dims]:
    """Each graph input's dims at the shapes the guess runs at (the user's, else the declared ones)."""
    inits = {t.name for t in proto.graph.initializer}
    out: dict[str, Dims] = {}
    for value in proto.graph.input:
        if value.name in inits:
            continue
        declared = [
            d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
            for d in value.type.tensor_type.shape.dim
        ]
        given = (inputs or {}).get(value.name)
        out[value.name] = tuple((int(g) if g else None) for g in given) if given else tuple(declared)
    return out


def _types(proto: Any) -> dict[str, int]:
    return {v.name: v.type.tensor_type.elem_type for v in proto.graph.input}


def tagger(
    outputs: list[tuple[str, Dims]],
    proto: Any,
    model: Path,
    inputs: Mapping[str, Sequence[int | None]] | None,
) -> tuple[dict[str, Any], str] | None:
    """(task, why) when the model reads token ids and its output holds per-token scores, else None."""
    from backends.passes.data import index_bounds

    bounds = index_bounds(proto)
    dims, types = input_dims(proto, inputs), _types(proto)
    ids = next((n for n in dims if n in bounds and types.get(n) in _INTS and len(dims[n]) == 2), None)
    if ids is None:
        return None
    seq = dims[ids][1]
    found = next(
        (
            (k, n, d)
            for k, (n, d) in enumerate(outputs)
            if len(d) == 3 and (seq is None or d[1] in (seq, None))
        ),
        None,
    )
    if found is None:
        return None
    index, name, out_dims = found
    from backends.tasks.config import last_layer, scores_output

    if not scores_output(proto.graph, name):
        why = (
            f"output {name} {_text(out_dims)} is per-token features ({last_layer(proto.graph, name) or 'no'} "
            f"layer's output, not a linear layer's class scores) beside token ids {ids} {_text(dims[ids])}: "
            "no task measures them; the generic measure compares them as numbers"
        )
        return {"type": "regression"}, why
    task: dict[str, Any] = {"type": "tokens"}
    if index:
        task["output"] = name
    shown = f"output {name} {_text(out_dims)} holds per-token class scores beside token ids {ids} {_text(dims[ids])}"
    masks = [
        n
        for n, d in dims.items()
        if n != ids
        and d == dims[ids]
        and (types.get(n) == _BOOL or (types.get(n) in _INTS and n not in bounds))
    ]
    if not masks:
        return task, f"{shown} and no padding mask: every position is scored"
    mask = masks[0]
    pad = _padding_value(model, dims, ids, mask, index, bounds[ids])
    task["mask"] = mask
    if pad is None:
        why = (
            f"{shown}; {mask} {_text(dims[mask])} is read as its padding mask, but running the model did not "
            "tell which value marks padding (pad_value 0 assumed: check it)"
        )
        return task, why
    task["pad_value"] = pad
    word = "true" if types.get(mask) == _BOOL and pad else "false" if types.get(mask) == _BOOL else str(pad)
    why = (
        f"{shown}; {mask} {_text(dims[mask])} is its padding mask, {word} at padded positions: with the "
        "second half marked so, changing its ids leaves the first half's scores unchanged"
    )
    return task, why


def _text(dims: Dims) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _padding_value(
    model: Path, dims: Mapping[str, Dims], ids: str, mask: str, output: int, bound: int
) -> int | None:
    """The mask value the model treats as padding (run in a child process: a model that crashes ONNX
    Runtime must not take `npuctl init` down); None when the runs do not tell."""
    import tempfile

    from backends.sdk.child_call import Child, Unloadable
    from backends.sdk.errors import BackendError

    child = Child()
    request = {
        "model": str(model),
        "shapes": {n: [d or 0 for d in v] for n, v in dims.items()},
        "ids": ids,
        "mask": mask,
        "output": output,
        "bound": bound,
    }
    try:
        with tempfile.TemporaryDirectory(prefix="npuctl-guess-") as tmp:
            found = child.call(
                "backends.tasks.guess_tokens:padding_value", request, Path(tmp) / "run.log", "onnxruntime"
            )
    except (BackendError, Unloadable):
        return None
    finally:
        child.close()
    return int(found) if found in (0, 1) else None


def padding_value(request: dict[str, Any]) -> int | None:
    """(the child's side) 0 or 1 when exactly that mask value at the second half of the sequence hides
    the ids there from the first half's scores; None otherwise."""
    try:
        import numpy as np
        import onnxruntime as ort

        from backends.tasks.guess import feed_shape, numpy_type

        options = ort.SessionOptions()
        options.log_severity_level = 4
        session = ort.InferenceSession(str(request["model"]), options, providers=["CPUExecutionProvider"])
        shapes = dict(request.get("shapes") or {})
        ids, mask, output = str(request["ids"]), str(request["mask"]), int(request["output"])
        rng = np.random.default_rng(0)
        feed: dict[str, Any] = {}
        for value in session.get_inputs():
            shape = feed_shape(value.shape, shapes.get(value.name))
            feed[value.name] = np.zeros(shape, numpy_type(value.type))
        shape = feed[ids].shape
        half = shape[1] // 2
        if half < 1:
            return None
        bound = max(3, int(request["bound"]))
        first = rng.integers(1, bound, shape)
        second = first.copy()
        second[:, half:] = 1 + (first[:, half:] % (bound - 1))  # another id at every padded position
        holds = []
        for pad in (0, 1):
            m = np.full(shape, 1 - pad)
            m[:, half:] = pad
            feed[mask] = m.astype(feed[mask].dtype)
            got = []
            for tokens in (first, second):
                feed[ids] = tokens.astype(feed[ids].dtype)
                got.append(np.asarray(session.run(None, feed)[output], dtype=np.float64)[:, :half])
            kept = got[0]
            if np.isfinite(kept).all() and np.allclose(
                kept, got[1], rtol=1e-4, atol=1e-5 * max(1.0, np.abs(kept).max())
            ):
                holds.append(pad)
        return holds[0] if len(holds) == 1 else None
    except Exception:  # onnxruntime raises its own types; the guess then says it could not tell
        return None
