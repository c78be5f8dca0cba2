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
    try:
        with open("/proc/cpuinfo") as fh:
            flags = next((line.split(":", 1)[1].split() for line in fh if line.startswith("flags")), [])
    except OSError:
        flags = []
    for isa in ("avx512f", "avx2", "avx", "sse4_1"):
        if isa in flags:
            return f"{machine}-{isa}"
    return machine


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
