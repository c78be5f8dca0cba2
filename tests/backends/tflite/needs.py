"""The mark every TFLite-path test module carries: the managed tflite venv must exist (`.ci/setup`
installs it, so a CI run skips none of them)."""

from __future__ import annotations

import pytest

from backends.sdk import toolchains

NEEDS_TFLITE = pytest.mark.skipif(
    toolchains.python(toolchains.TFLITE) is None,
    reason="needs `npuctl toolchain install tflite` (.ci/setup)",
)
