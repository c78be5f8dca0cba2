"""backends.sdk.host.int8_dot: which hosts' int8 kernels clip, by CPU flags, and on this host by running
ONNX Runtime's fused kernels on sums that overflow int16."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnxruntime as ort
import pytest

from backends.sdk import host
from tests.backends import int8_sums


@pytest.fixture
def fresh() -> Iterator[None]:
    host.int8_dot.cache_clear()
    yield
    host.int8_dot.cache_clear()


@pytest.mark.parametrize(
    ("machine", "flags", "expected"),
    [
        ("x86_64", ["sse4_1", "avx", "avx2", "fma"], "saturating"),
        ("x86_64", ["avx2", "avx512f", "avx512bw"], "saturating"),  # AVX-512 without VNNI clips too
        ("x86_64", ["avx2", "avx512f", "avx512_vnni"], "exact"),
        ("x86_64", ["avx2", "avx_vnni"], "exact"),
        ("aarch64", [], "exact"),
    ],
)
def test_int8_dot_by_flags(
    fresh: None, monkeypatch: pytest.MonkeyPatch, machine: str, flags: list[str], expected: str
) -> None:
    monkeypatch.setattr(host.platform, "machine", lambda: machine)
    monkeypatch.setattr(host, "_cpu_flags", lambda: flags)
    assert host.int8_dot() == expected
    assert host.int8_fingerprint() == {"host_int8_dot": expected}


def _fused(weights: str) -> float:
    session = ort.InferenceSession(int8_sums.model(weights), providers=["CPUExecutionProvider"])
    return float(np.asarray(session.run(None, {"x": int8_sums.ones()})[0]).ravel()[0])


def test_this_hosts_kernels_do_what_int8_dot_says() -> None:
    exact_u8s8 = int8_sums.qdq_math("int8")
    assert exact_u8s8 == pytest.approx(16.0, abs=0.07)
    got = _fused("int8")
    if host.int8_dot() == "saturating":
        assert got < 0.6 * exact_u8s8, f"u8s8 sums were not clipped on this host ({host.host_isa()})"
    else:
        assert got == pytest.approx(exact_u8s8, abs=0.07)
    assert _fused("uint8") == pytest.approx(int8_sums.qdq_math("uint8"), abs=0.07)  # u8u8: exact anywhere
