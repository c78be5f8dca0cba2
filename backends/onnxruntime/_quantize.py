"""The cpu target's quantize stage: the shared ptq pass, with 8-bit weights that this host's int8
kernels sum exactly.

The cpu target is the host, so its int8 model runs on the host's kernels, and those differ by ISA
(backends.sdk.host.int8_dot): x86 without VNNI sums u8 x s8 product pairs in int16 and clips. There the
weights are uint8 (asymmetric, per channel as before): ONNX Runtime's u8u8 kernels widen to int16
before they multiply and never clip, at the same speed on such a host. With int8 activations
(there is no s8 x u8 kernel) the weights are 7-bit instead (reduce_range). Where the kernels are exact
the weights stay int8 (u8s8 is the fast path with VNNI). The host's kind is in the fingerprint: the
artifact depends on it. The search and the check score the int8 model on the host's fused kernels, as
its compiled artifact runs (their rounding differs from the Q/DQ math by a step here and there), so
the drop they measure is the one evaluate records.
"""

from __future__ import annotations

from dataclasses import replace

from backends.passes.quant.policy import Policy
from backends.passes.quant.stage import QuantizePass
from backends.sdk.base import StageRequest
from backends.sdk.host import int8_dot, int8_fingerprint

_SWITCH = (
    "weights uint8 (asymmetric): this host's int8 kernels clip u8 x s8 sums (x86 without VNNI); "
    "ONNX Runtime's u8u8 kernels do not"
)

_CLIPS = (
    "activations {}: weights 7-bit (reduce_range): this host's int8 kernels clip 8 x 8-bit pair sums "
    "(x86 without VNNI) and ONNX Runtime has no kernel for int8 activations with uint8 weights"
)


class HostQuantizePass(QuantizePass):
    """Stage "quantize" for the host CPU."""

    def fingerprint(self) -> dict[str, str]:
        return {**super().fingerprint(), **int8_fingerprint()}

    def policy(self, request: StageRequest) -> Policy:
        base = replace(super().policy(request), host_kernels=True)  # its artifact runs on these kernels
        if base.mode != "ptq" or base.weights != "int8" or int8_dot() != "saturating":
            return base
        if base.activations != "uint8":  # no s8 x u8 kernels: 7-bit weights keep s8 x s7 sums in int16
            return replace(base, reduce_range=True, notes=(*base.notes, _CLIPS.format(base.activations)))
        return replace(base, weights="uint8", weight_symmetric=False, notes=(*base.notes, _SWITCH))
