"""What of this host can change a toolchain's output bytes, for the keys of stages that run here."""

from __future__ import annotations

import platform
from functools import cache


@cache
def host_isa() -> str:
    """The widest vector ISA of this host. Kernels pick their code path by it (ONNX Runtime's level-3
    graphs are laid out for it: the NCHWc block is 16 floats with AVX-512, 8 with AVX2), and float
    results computed on another path can round differently, so a build that computes on the host
    (a compile's constant folding, a quantizer's calibration) keys on it."""
    machine = platform.machine().lower()
    flags = _cpu_flags()
    for isa in ("avx512f", "avx2", "avx", "sse4_1"):
        if isa in flags:
            return f"{machine}-{isa}"
    return machine


@cache
def int8_dot() -> str:
    """How this host's int8 matrix kernels (ONNX Runtime's MLAS) sum u8 x s8 products: "exact" (int32
    dot products: x86 VNNI or AMX, any Arm) or "saturating" (x86 without VNNI: AVX2's vpmaddubsw adds
    each pair of products into int16 and clips at 32767, which 255 x 127 x 2 exceeds). Measured on an
    AVX2 host: a YOLOX detector's u8s8 QDQ model scored box F1 0.795 fused where its QDQ math scores
    0.925; the same model with uint8 weights (MLAS's u8u8 kernels widen to int16 first) 0.915 both
    ways; 7-bit weights (reduce_range, ONNX Runtime's advice) 0.872."""
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64", "i386", "i686"):
        return "exact"
    flags = set(_cpu_flags())
    return "exact" if flags & {"avx512_vnni", "avx_vnni", "amx_int8"} else "saturating"


def _cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo") as fh:
            return next((line.split(":", 1)[1].split() for line in fh if line.startswith("flags")), [])
    except OSError:
        return []


def int8_fingerprint() -> dict[str, str]:
    """The host fact a build for the host CPU depends on (its weight type follows int8_dot)."""
    return {"host_int8_dot": int8_dot()}


@cache
def memory_layout() -> dict[str, str]:
    """What places a process's memory on this host when address randomization is off: the kernel
    (where mmap puts thread stacks and arenas, what the initial stack holds) and the CPUs the process
    may use (how many threads its libraries start, each with its own stack and arena). A toolchain
    that writes host addresses into its output (rknn-toolkit2 2.5.0 writes stack and heap pointers,
    0x7fff... and 0x5555..., at fixed offsets of a .rknn) builds other bytes when either changes."""
    import os

    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return {"kernel": platform.release(), "cpus": str(cpus)}
