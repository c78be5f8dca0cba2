"""`validate` refuses what the target's toolchain cannot do with the quantization section, naming the
field (file:line:column) and the alternative, before any build: RKNN w8a16 / w16a16i on a
chip that does not build it, auto with explicit rules or int16 keeps (auto_hybrid), float keeps on a chip
without float; NNCF int16 keeps, auto and calibration methods it has no estimator for; on the TFLite
path, the layer search and float layers in a 16-bit-activation model."""

from __future__ import annotations

import pytest

from reconciler.spec import check
from tests.spec.conftest import GOOD, Repo

BASE = GOOD.replace('      nodes: ["n1*"]\n      op_types: [Softmax]\n', "      op_types: [Softmax]\n")


def _errors(repo: Repo, target: str, quantization_lines: str) -> list[str]:
    text = BASE.replace("  target: cpu\n", f"  target: {target}\n")
    head, tail = text.split("  quantization:\n")
    rest = tail[tail.index("  evaluate:") :]
    spec = repo.write("specs/a.yaml", f"{head}  quantization:\n{quantization_lines}{rest}")
    (report,) = check([spec], repo.root)
    return [str(e) for e in report.errors]


PTQ = "    mode: ptq\n    calibration: {data: ../data/calib, samples: 8}\n"


@pytest.mark.parametrize(
    ("target", "lines", "field", "says"),
    [
        ("rk3588", PTQ + "    activations: int16\n", "spec.quantization.activations", "w8a16"),
        ("rk3566", PTQ + "    weights: int16\n    activations: int16\n", "spec.quantization.activations", "w16a16i"),
        (
            "rk3588",
            PTQ + "    sensitive_layers: {op_types: [Softmax], auto: {max_accuracy_drop: 0.01}}\n",
            "spec.quantization.sensitive_layers.auto",
            "never both",
        ),
        (
            "rk3588",
            PTQ + "    sensitive_layers: {keep: int16, auto: {max_accuracy_drop: 0.01}}\n",
            "spec.quantization.sensitive_layers.keep",
            "float16, not int16",
        ),
        ("rv1106", PTQ + "    sensitive_layers: {keep: fp16, op_types: [Softmax]}\n", "spec.quantization.sensitive_layers.keep", "no float unit"),
        ("intel-npu", PTQ + "    sensitive_layers: {keep: int16, op_types: [Softmax]}\n", "spec.quantization.sensitive_layers.keep", "not at int16"),
        ("intel-npu", PTQ + "    sensitive_layers: {auto: {max_accuracy_drop: 0.01}}\n", "spec.quantization.sensitive_layers.auto", "no auto"),
        ("ethos-u55", PTQ + "    sensitive_layers: {auto: {max_accuracy_drop: 0.01}}\n", "spec.quantization.sensitive_layers.auto", "not built for ethos-u55"),
        ("mediatek-mdla3", PTQ + "    activations: int16\n    sensitive_layers: {keep: fp32, op_types: [Softmax]}\n", "spec.quantization.sensitive_layers.keep", "16-bit activations"),
        (
            "intel-npu",
            "    mode: ptq\n    calibration: {data: ../data/calib, samples: 8, method: entropy}\n",
            "spec.quantization.calibration.method",
            "no entropy range estimator",
        ),
        ("ascend-310p", PTQ, "spec.quantization.mode", "use mode: fp16"),  # ATC rejects a QDQ model
    ],
)  # fmt: skip
def test_an_unsupported_request_is_a_validate_error_at_its_field(
    repo: Repo, target: str, lines: str, field: str, says: str
) -> None:
    errors = _errors(repo, target, lines)
    hits = [e for e in errors if f": {field}: " in e]
    assert hits and says in hits[0], errors
    location = hits[0].split(": ", 1)[0]
    path, line, column = location.rsplit(":", 2)
    assert path.endswith("specs/a.yaml") and int(line) > 0 and int(column) > 0


@pytest.mark.parametrize(
    ("target", "lines"),
    [
        ("rk3562", PTQ + "    activations: int16\n"),  # the one RKNN chip that builds w8a16
        ("rk3588", PTQ + "    sensitive_layers: {auto: {max_accuracy_drop: 0.01}}\n"),  # auto_hybrid
        ("ethos-u55", PTQ + "    sensitive_layers: {keep: fp32, op_types: [Softmax]}\n"),  # on the Cortex-M
        (
            "intel-npu",
            "    mode: ptq\n    calibration: {data: ../data/calib, samples: 8, method: percentile}\n",
        ),
        ("ascend-310p", "    mode: fp16\n"),
    ],
)
def test_what_the_toolchain_can_do_passes(repo: Repo, target: str, lines: str) -> None:
    assert not [e for e in _errors(repo, target, lines) if "spec.quantization" in e]
