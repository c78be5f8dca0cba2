"""An ONNX file read without its weights: the protobuf wire format walked with seeks over tensor data.

Validation needs a model's inputs, nodes and initializer names, never the initializer bytes, and on a
1 GB model `onnx.load` reads and copies all of them (external data aside, `load_external_data=False`
does not help with embedded initializers). Here every field of the model and its graph is kept as
read, except the data of large initializers (TensorProto raw_data and the packed typed arrays), which
is skipped with a seek: the kept bytes are parsed by onnx as a model whose big tensors are empty.
"""

from __future__ import annotations

from typing import Any, BinaryIO

_GRAPH = 7
"""ModelProto.graph"""
_INITIALIZER = 5
"""GraphProto.initializer"""
_TENSOR_DATA = frozenset({4, 5, 7, 9, 10, 11})
"""TensorProto float/int32/int64/raw/double/uint64 data (string data is always kept)."""
_LENGTH_DELIMITED = 2


class SkimError(ValueError):
    """The bytes are not a well-formed protobuf message."""


def _varint(fh: BinaryIO) -> int | None:
    shift = result = 0
    while True:
        byte = fh.read(1)
        if not byte:
            if shift == 0:
                return None
            raise SkimError("truncated varint")
        result |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return result
        shift += 7
        if shift > 63:
            raise SkimError("varint too long")


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(fh: BinaryIO, end: int) -> tuple[int, int, int] | None:
    """(field number, wire type, payload length or -1) of the next field before `end`; the file is
    left at the payload's start."""
    if fh.tell() >= end:
        return None
    tag = _varint(fh)
    if tag is None:
        return None
    number, wire = tag >> 3, tag & 7
    if wire == _LENGTH_DELIMITED:
        length = _varint(fh)
        if length is None:
            raise SkimError("truncated length")
        return number, wire, length
    return number, wire, -1


def _copy(fh: BinaryIO, number: int, wire: int, length: int) -> bytes:
    """The field as it is in the file (re-encoded tag), the file positioned after its tag."""
    tag = _encode_varint(number << 3 | wire)
    if wire == _LENGTH_DELIMITED:
        return tag + _encode_varint(length) + _read(fh, length)
    if wire == 0:
        value = _varint(fh)
        if value is None:
            raise SkimError("truncated varint")
        return tag + _encode_varint(value)
    if wire in (1, 5):
        return tag + _read(fh, 8 if wire == 1 else 4)
    raise SkimError(f"unsupported wire type {wire}")


def _message(fh: BinaryIO, end: int, keep: Any) -> bytes:
    """The fields of the message ending at `end`, each through `keep(number, fh, start, wire, length)`:
    its bytes to keep instead, or None to copy the field as it is."""
    out = bytearray()
    while (found := _field(fh, end)) is not None:
        number, wire, length = found
        kept = keep(number, fh, fh.tell(), wire, length)
        out += _copy(fh, number, wire, length) if kept is None else kept
    if fh.tell() != end:
        raise SkimError("a field runs past the end of its message")
    return bytes(out)


def _read(fh: BinaryIO, length: int) -> bytes:
    data = fh.read(length)
    if len(data) != length:
        raise SkimError("truncated field")
    return data


def _wrap(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | _LENGTH_DELIMITED) + _encode_varint(len(payload)) + payload


def _tensor(number: int, fh: BinaryIO, start: int, wire: int, length: int) -> bytes | None:
    if number in _TENSOR_DATA and wire == _LENGTH_DELIMITED:
        fh.seek(length, 1)  # the weights: skipped, never read
        return b""
    return None


def skim(fh: BinaryIO, size: int, keep_bytes: int = 1 << 16) -> bytes:
    """The serialized model in `fh` (`size` bytes) without the data of its initializers larger than
    `keep_bytes` (their name, type and dims stay; smaller ones are kept whole)."""

    def graph(number: int, fh: BinaryIO, start: int, wire: int, length: int) -> bytes | None:
        if number == _INITIALIZER and wire == _LENGTH_DELIMITED and length > keep_bytes:
            return _wrap(number, _message(fh, start + length, _tensor))
        return None

    def model(number: int, fh: BinaryIO, start: int, wire: int, length: int) -> bytes | None:
        if number == _GRAPH and wire == _LENGTH_DELIMITED:
            return _wrap(number, _message(fh, start + length, graph))
        return None

    return _message(fh, size, model)


_RAW_DATA = 9
"""TensorProto.raw_data"""
_NAME = 8
"""TensorProto.name"""


def with_weights(light: bytes, weights: dict[str, bytes]) -> list[bytes]:
    """The serialized model `light` (deterministic, its large initializers without data) with each
    named initializer's raw data put back where deterministic serialization writes it (fields in
    number order), as pieces to write one after the other: the same bytes as serializing the whole
    model, and the weights are never copied (each is one of the pieces)."""
    import io

    def header(number: int, length: int) -> bytes:
        return _encode_varint(number << 3 | _LENGTH_DELIMITED) + _encode_varint(length)

    def tensor(fields: bytes) -> list[bytes]:
        parts: list[tuple[int, bytes]] = []
        name = None
        fh = io.BytesIO(fields)
        while (found := _field(fh, len(fields))) is not None:
            number, wire, length = found
            start = fh.tell()
            raw = _copy(fh, number, wire, length)
            if number == _NAME and wire == _LENGTH_DELIMITED:
                fh.seek(start)
                name = _read(fh, length).decode("utf-8")
            parts.append((number, raw))
        data = weights.pop(name, None) if name is not None else None
        if data is None:
            return [fields]
        at = next((i for i, (number, _) in enumerate(parts) if number > _RAW_DATA), len(parts))
        pieces = [raw for _, raw in parts[:at]]
        pieces += [header(_RAW_DATA, len(data)), data]
        return pieces + [raw for _, raw in parts[at:]]

    def fields_of(payload: bytes, number_of_interest: int, inner: Any) -> list[bytes]:
        pieces: list[bytes] = []
        fh = io.BytesIO(payload)
        while (found := _field(fh, len(payload))) is not None:
            number, wire, length = found
            if number == number_of_interest and wire == _LENGTH_DELIMITED:
                sub = inner(_read(fh, length))
                pieces += [header(number, sum(len(p) for p in sub)), *sub]
            else:
                pieces.append(_copy(fh, number, wire, length))
        return pieces

    out = fields_of(light, _GRAPH, lambda graph: fields_of(graph, _INITIALIZER, tensor))
    if weights:
        raise SkimError(f"no initializer named {sorted(weights)[0]!r} to put its data back into")
    return out
