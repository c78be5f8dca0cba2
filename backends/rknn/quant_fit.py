"""What RKNN-Toolkit2 2.3.2 can do with the spec's quantization section, per chip, checked before any
build (`validate`) and again by the quantize stage.

From the toolkit's API reference (shared/reference/toolchains.md, section 3): `quantized_dtype` w8a8 on
every chip, w8a16 only on RK3562, w16a16i only on RV1103/RV1106, w4a16 on RK3576/RV1126B;
`auto_hybrid` works on w8a8 only and moves every op whose cosine to float is under
`auto_hybrid_cos_thresh` (0.98) to float16; `custom_hybrid` keeps named layers at float16 or int16;
the build runs one or the other, never both. RV1106/RV1103 have no float unit, so nothing can be kept
in float there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DTYPE_CHIPS: dict[str, tuple[str, ...]] = {
    "w8a16": ("rk3562",),
    "w16a16i": ("rv1103", "rv1106"),
}
"""quantized_dtype -> the only platforms that build it (w8a8 builds everywhere)."""

_DTYPES = {
    ("int8", "int8"): "w8a8",
    ("int8", "uint8"): "w8a8",
    ("int8", "int16"): "w8a16",
    ("int8", "uint16"): "w8a16",
    ("int16", "int16"): "w16a16i",
}

AUTO_HYBRID_COS = 0.98


def dtype(weights: str, activations: str) -> str | None:
    return _DTYPES.get((weights, activations))


def errors(
    section: Mapping[str, Any], platform: str, has_float: bool, default_activation: str = "int8"
) -> list[tuple[str, str]]:
    """(field, message) for each request the toolkit cannot do on `platform`."""
    if section.get("mode") != "ptq":
        return []
    found: list[tuple[str, str]] = []
    weights = str(section.get("weights", "int8"))
    activations = str(section.get("activations") or default_activation)
    kind = dtype(weights, activations)
    if kind is None:
        found.append(
            (
                "quantization.activations",
                f"rknn has no quantized_dtype for weights {weights} with activations {activations} "
                "(w8a8, w8a16 on rk3562, w16a16i on rv1103/rv1106)",
            )
        )
    elif kind in DTYPE_CHIPS and platform not in DTYPE_CHIPS[kind]:
        found.append(
            (
                "quantization.activations",
                f"rknn {kind} (weights {weights}, activations {activations}) builds only on "
                f"{', '.join(DTYPE_CHIPS[kind])}, not {platform}; use activations int8 (w8a8) and keep "
                "sensitive layers with sensitive_layers (custom hybrid)",
            )
        )
    rules: Mapping[str, Any] = section.get("sensitive_layers") or {}
    explicit = any(rules.get(k) for k in ("nodes", "op_types", "first", "last"))
    keep = str(rules.get("keep", "fp16"))
    if rules and keep in ("fp16", "fp32") and not has_float:
        found.append(
            (
                "quantization.sensitive_layers.keep",
                f"rknn on {platform} has no float unit: layers cannot be kept in {keep}; use keep: int16",
            )
        )
    if rules.get("auto") is not None:
        if explicit:
            found.append(
                (
                    "quantization.sensitive_layers.auto",
                    "rknn builds either auto_hybrid (auto) or a custom hybrid (nodes/op_types/first/last), "
                    "never both; keep the explicit rules or auto",
                )
            )
        if kind is not None and kind != "w8a8":
            found.append(
                (
                    "quantization.sensitive_layers.auto",
                    f"rknn auto_hybrid works on w8a8 only, not {kind}; use activations int8",
                )
            )
        if keep == "int16":
            found.append(
                (
                    "quantization.sensitive_layers.keep",
                    "rknn auto_hybrid moves layers to float16, not int16; use keep: fp16 with auto, or name "
                    "the layers (nodes/op_types) to keep them at int16",
                )
            )
    return found


def auto_hybrid_note(rules: Any) -> str:
    """Exactly what `auto` becomes on RKNN, with what of the spec it does not honour."""
    return (
        f"sensitive_layers.auto mapped to RKNN build(auto_hybrid=True): every op whose cosine to float is "
        f"under {AUTO_HYBRID_COS} (auto_hybrid_cos_thresh) moves to float16; RKNN does not apply "
        f"max_accuracy_drop {rules.auto.max_accuracy_drop} or max_layers {rules.auto.max_layers}, and "
        f"keeps in float16 whatever keep says ({rules.keep})"
    )
