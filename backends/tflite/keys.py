"""The TFLite path's quantize version, shared by every backend whose quantize stage is this
module's conversion (Ethos-U, MediaTek): one number moves both keys when the conversion changes."""

QUANTIZE_VERSION = "7-onnx2tf"
"""7: the float32 TFLite keyed by the SavedModel's signature where onnx2tf's own has none."""
