"""The TFLite path's quantize version, shared by every backend whose quantize stage is this
package's conversion (Ethos-U, MediaTek): one number moves both keys when the conversion's output
would change (the worker, the converter forms it reads, the names it gives onnx2tf)."""

QUANTIZE_VERSION = "13-onnx2tf"
