"""The table of invalid specs: each names the exact file:line:column and field path of its error."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from reconciler.spec import check
from tests.spec.conftest import GOOD, GOOD_CLS, Repo, edit


@dataclass(frozen=True)
class Case:
    id: str
    text: str
    """specs/a.yaml, the spec checked."""
    line: int
    column: int | str
    """The column, or a token whose first occurrence on that line starts at it."""
    field: str
    message: str
    """A fragment of the message."""
    file: str = "specs/a.yaml"
    """The file the error must point at."""
    extra: dict[str, str] = dataclasses.field(default_factory=dict)
    setup: Callable[[Repo], None] | None = None


def _symlink_out(repo: Repo) -> None:
    outside = repo.root.parent / "outside.onnx"
    outside.write_bytes((repo.root / "models" / "squeezenet.onnx").read_bytes())
    (repo.root / "models" / "link.onnx").symlink_to(outside)


def _corrupt_model(repo: Repo) -> None:
    (repo.root / "models" / "bad.onnx").write_text("this is not an ONNX model\n")


BOMB_HEAD = "apiVersion: npuctl/v1\nkind: Deployment\nmetadata:\n  name: bomb\n  labels:\n"
BOMB = (
    BOMB_HEAD
    + '    a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    + "".join(
        f"    {c}: &{c} [" + ", ".join([f"*{p}"] * 10) + "]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    + "spec: {}\n"
)

CHILD = """\
apiVersion: npuctl/v1
kind: Deployment
extends: {base}
metadata:
  name: child
spec:
  target: cpu
"""

BASE = """\
apiVersion: npuctl/v1
kind: DeploymentBase
metadata:
  name: common
spec:
  model: {path: ../../models/squeezenet.onnx}
  inputs:
    data_0: [1, 3, 224, 224]
  evaluate:
    runs: 5
"""

EVALUATE_GONE = {20: "  #", 21: "  #", 22: "  #"}

CASES = [
    # mistyped keys, with did-you-mean
    Case("mistyped-key", edit(GOOD, {15: "      smaples: 8"}), 15, "smaples",
         "spec.quantization.calibration.smaples", "unknown key 'smaples'; did you mean 'samples'?"),
    Case("mistyped-section", edit(GOOD, {19: "  evaluat:"}), 19, "evaluat",
         "spec.evaluat", "unknown key 'evaluat'; did you mean 'evaluate'?"),
    Case("unknown-key-listed", edit(GOOD, {22: "    colour: red"}), 22, "colour",
         "spec.evaluate.colour", "unknown key 'colour'; allowed keys: runner, data, labels"),
    Case("wrong-kind", edit(GOOD, {2: "kind: Deploymnet"}), 2, "Deploymnet",
         "kind", "must be one of Deployment; got the string 'Deploymnet'; did you mean 'Deployment'?"),
    Case("wrong-api-version", edit(GOOD, {1: "apiVersion: npuctl/v2"}), 1, "npuctl",
         "apiVersion", "must be one of npuctl/v1"),
    # wrong types
    Case("string-for-int", edit(GOOD, {15: "      samples: eight"}), 15, "eight",
         "spec.quantization.calibration.samples", "must be an integer, got the string 'eight'"),
    Case("float-for-int", edit(GOOD, {22: "    runs: 5.5"}), 22, "5.5",
         "spec.evaluate.runs", "must be an integer, got the number 5.5"),
    Case("quoted-int", edit(GOOD, {22: '    runs: "5"'}), 22, '"5"',
         "spec.evaluate.runs", "must be an integer, got the string '5'"),
    Case("list-for-mapping", edit(GOOD, {9: "  inputs: [1, 3]", 10: "  #"}), 9, "[",
         "spec.inputs", "must be a mapping, got a list"),
    Case("bool-for-string", edit(GOOD, {4: "  name: yes"}), 4, "yes",
         "metadata.name", 'must be a string, got the boolean true; quote it: "yes"'),
    Case("number-for-string",
         edit(GOOD, {6: "  model: {path: ../models/squeezenet.onnx, version: 1.10}", 7: "  #"}), 6,
         "1.10", "spec.model.version", 'must be a string, got the number 1.1; quote it: "1.10"'),
    # zero, negative, out of range
    Case("zero-samples", edit(GOOD, {15: "      samples: 0"}), 15, "0",
         "spec.quantization.calibration.samples", "must be > 0, got the integer 0"),
    Case("negative-runs", edit(GOOD, {22: "    runs: -1"}), 22, "-1", "spec.evaluate.runs", "must be > 0"),
    Case("negative-latency", edit(GOOD, {24: "    latency_ms: {p90: -5}"}), 24, "-5",
         "spec.slo.latency_ms.p90", "must be > 0"),
    Case("coverage-above-one", edit(GOOD, {24: "    npu_coverage: 1.5"}), 24, "1.5",
         "spec.slo.npu_coverage", "must be <= 1"),
    # enumerations and catalog ids
    Case("unknown-target", edit(GOOD, {8: "  target: rk3599"}), 8, "rk3599",
         "spec.target", "unknown target 'rk3599'; did you mean 'rk3588'"),
    Case("enum-typo", edit(GOOD, {12: "    mode: ptg"}), 12, "ptg", "spec.quantization.mode",
         "must be one of none, fp16, ptq, qat; got the string 'ptg'; did you mean 'ptq'?"),
    Case("bad-name", edit(GOOD, {4: "  name: Squeeze_CPU"}), 4, "Squeeze", "metadata.name",
         "must be 1-63 lower-case letters"),
    Case("bad-runner", edit(GOOD, {22: "    runner: ftp://host"}), 22, "ftp", "spec.evaluate.runner",
         "must be local, ssh://user@host[:port] or adb://serial"),
    Case("malformed-sha256",
         edit(GOOD, {6: "  model: {path: ../models/squeezenet.onnx, sha256: abc}", 7: "  #"}), 6,
         "abc", "spec.model.sha256", "must be a sha256: 64 lower-case hex digits"),
    # required keys and model-level rules
    Case("missing-target", edit(GOOD, {8: "  # no target"}), 5, 1, "spec.target", "required key is missing"),
    Case("ptq-without-calibration", edit(GOOD, {13: "    #", 14: "    #", 15: "    #"}), 11, "quantization",
         "spec.quantization", "mode ptq needs a calibration section"),
    # bad shapes
    Case("scalar-for-a-tensor", edit(GOOD, {10: "    data_0: scalar"}), 10, "scalar", "spec.inputs.data_0",
         "rank 0, but model input 'data_0' has rank 4"),
    Case("zero-dim", edit(GOOD, {10: "    data_0: [1, 3, 0, 224]"}), 10, "0,", "spec.inputs.data_0.2",
         "must be > 0"),
    Case("too-many-dims", edit(GOOD, {10: "    data_0: [1, 1, 1, 1, 1, 1, 1, 1, 1]"}), 10, "[",
         "spec.inputs.data_0", "must have at most 8 items, got 9"),
    Case("no-inputs", edit(GOOD, {9: "  inputs: {}", 10: "  #"}), 9, "{", "spec.inputs",
         "must have at least 1 entry, got 0"),
    Case("dynamic-dim-unfixed", edit(GOOD, {10: "    data_0: [1, 3, h, 224]"}), 10, "h,",
         "spec.inputs.data_0.2", "a dynamic dimension must be given a fixed size here"),
    # against the real ONNX graph
    Case("dynamic-input-left-out", edit(GOOD_CLS, {9: "    image: [1, 3, 48, 192]"}), 8, "inputs",
         "spec.inputs",
         "model input 'x' [?, 3, ?, ?] needs a fixed shape here; 3 of its dimensions are dynamic"),
    Case("input-not-in-graph", edit(GOOD, {10: "    image: [1, 3, 224, 224]"}), 10, "image",
         "spec.inputs.image", "the model has no input 'image'; its inputs: data_0"),
    Case("wrong-rank", edit(GOOD, {10: "    data_0: [1, 3, 224]"}), 10, "[", "spec.inputs.data_0",
         "rank 3, but model input 'data_0' has rank 4: [1, 3, 224, 224]"),
    Case("variant-unknown-input",
         edit(GOOD, {19: "  shape_variants: [{image: [1, 3, 224, 224]}]", **EVALUATE_GONE}), 5,
         1, "spec", "shape_variants[0] names inputs not in `inputs`: image"),
    Case("preprocess-input-missing", edit(GOOD, {19: "  preprocess: {input: image}", **EVALUATE_GONE}), 19,
         "image", "spec.preprocess.input", "the model has no input 'image'"),
    Case("sensitive-pattern-matches-nothing", edit(GOOD, {17: '      nodes: ["/head/*"]'}), 17, '"/head',
         "spec.quantization.sensitive_layers.nodes.0", "'/head/*' matches no node"),
    Case("sensitive-op-type-absent", edit(GOOD, {18: "      op_types: [softmax]"}), 18, "softmax",
         "spec.quantization.sensitive_layers.op_types.0",
         "op type 'softmax' is not in the model; did you mean 'Softmax'?"),
    Case("rewrite-exclusion-matches-nothing",
         edit(GOOD, {19: '  rewrite: {exclude: ["conv_*"]}', **EVALUATE_GONE}), 19,
         '"conv', "spec.rewrite.exclude.0", "'conv_*' matches no node"),
    Case("rewrite-disabled-unknown",
         edit(GOOD, {19: '  rewrite: {disable: [gelu_recompse]}', **EVALUATE_GONE}), 19,
         "gelu_recompse", "spec.rewrite.disable.0",
         "unknown rewrite 'gelu_recompse'; did you mean 'gelu_recompose'"),
    Case("wrong-sha256-pin",
         edit(GOOD, {6: "  model: {path: ../models/squeezenet.onnx, sha256: " + "ab" * 32 + "}", 7: "  #"}),
         6,
         "abab", "spec.model.sha256", "pin does not match the model file, whose sha256 is "),
    # files
    Case("missing-model", edit(GOOD, {7: "    path: ../models/missing.onnx"}), 7, "../", "spec.model.path",
         "model file not found"),
    Case("corrupt-model", edit(GOOD, {7: "    path: ../models/bad.onnx"}), 7, "../", "spec.model.path",
         "not a readable ONNX model", setup=_corrupt_model),
    Case("package-not-installed",
         edit(GOOD, {6: "  model: {package: no_such_pkg_xyz, path: m.onnx}", 7: "  #"}), 6,
         "no_such", "spec.model.package", "package 'no_such_pkg_xyz' is not installed"),
    Case("path-escapes-repo", edit(GOOD, {7: "    path: ../../../../../../../../../etc/passwd"}), 7, "../",
         "spec.model.path", "resolves to /etc/passwd, outside the repository"),
    Case("absolute-path", edit(GOOD, {7: "    path: /etc/passwd"}), 7, "/etc", "spec.model.path",
         "'/etc/passwd' is absolute"),
    Case("symlink-out-of-repo", edit(GOOD, {7: "    path: ../models/link.onnx"}), 7, "../", "spec.model.path",
         "outside the repository", setup=_symlink_out),
    Case("data-escapes-repo", edit(GOOD, {14: "      data: ../../outside"}), 14, "../",
         "spec.quantization.calibration.data", "outside the repository"),
    Case("labels-missing", edit(GOOD, {21: "    labels: ../data/eval/none.txt"}), 21, "../",
         "spec.evaluate.labels", "file not found"),
    # YAML safety
    Case("yaml-bomb", BOMB, 10, "&e", "metadata.labels.e", "alias bomb"),
    Case("duplicate-key", edit(GOOD, {22: "  target: rk3588"}), 22, "target", "spec.target",
         "duplicate key 'target' (first at line 8, column 3)"),
    Case("duplicate-key-flow", edit(GOOD, {24: "    latency_ms: {p90: 20, p90: 30}"}), 24, "p90: 30",
         "spec.slo.latency_ms.p90", "duplicate key 'p90' (first at line 24, column 18)"),
    Case("non-string-key", edit(GOOD, {24: "    on: 3"}), 24, "on", "spec.slo",
         "keys must be strings: quote 'on' (YAML reads it as the boolean true)"),
    Case("unsafe-tag", edit(GOOD, {8: "  target: !!python/object/apply:os.system [echo hi]"}), 8, "!!",
         "spec.target", "is not allowed: a spec holds plain values only"),
    Case("invalid-yaml", edit(GOOD, {8: "  target: [cpu"}), 9, 9, "",
         "invalid YAML: did not find expected ',' or ']'"),
    # extends
    Case("extends-cycle", CHILD.format(base="base.yaml"), 3, "a.yaml", "extends",
         "extends cycle: specs/a.yaml -> specs/base.yaml -> specs/a.yaml", file="specs/base.yaml",
         extra={"specs/base.yaml": "apiVersion: npuctl/v1\nkind: DeploymentBase\nextends: a.yaml\n"}),
    Case("extends-itself", CHILD.format(base="a.yaml"), 3, "a.yaml", "extends",
         "extends cycle: specs/a.yaml -> specs/a.yaml"),
    Case("extends-outside-repo", CHILD.format(base="../../outside.yaml"), 3, "../", "extends",
         "outside the repository"),
    Case("extends-missing", CHILD.format(base="nothere.yaml"), 3, "nothere", "extends",
         "file not found: specs/nothere.yaml"),
    Case("error-inside-base", CHILD.format(base="bases/common.yaml"), 10, "0", "spec.evaluate.runs",
         "must be > 0", file="specs/bases/common.yaml",
         extra={"specs/bases/common.yaml": BASE.replace("runs: 5", "runs: 0")}),
    Case("inherited-path-missing", CHILD.format(base="bases/common.yaml"), 6, "../", "spec.model.path",
         "model file not found", file="specs/bases/common.yaml",
         extra={"specs/bases/common.yaml": BASE.replace("squeezenet.onnx", "gone.onnx")}),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_invalid_spec_names_line_column_and_field(repo: Repo, case: Case) -> None:
    files = {"specs/a.yaml": case.text, **case.extra}
    for relative, text in files.items():
        repo.write(relative, text)
    if case.setup is not None:
        case.setup(repo)
    column = case.column
    if isinstance(column, str):
        line_text = files[case.file].splitlines()[case.line - 1]
        assert column in line_text, f"token {column!r} not on line {case.line}: {line_text!r}"
        column = line_text.index(column) + 1
    reports = check([repo.root / "specs" / "a.yaml"], repo.root)
    assert len(reports) == 1 and not reports[0].valid
    lines = [str(error) for error in reports[0].errors]
    prefix = f"{case.file}:{case.line}:{column}: " + (f"{case.field}: " if case.field else "")
    hits = [line for line in lines if line.startswith(prefix) and case.message in line]
    assert hits, f"expected {prefix}...{case.message}\ngot:\n" + "\n".join(lines)


def test_table_is_large_enough() -> None:
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)


def test_the_good_specs_are_valid(repo: Repo) -> None:
    """The table's baselines are valid, so each case fails for the reason it names."""
    repo.write("specs/a.yaml", GOOD)
    repo.write("specs/b.yaml", GOOD_CLS)
    reports = check([repo.root / "specs"], repo.root)
    assert [(r.name, [str(e) for e in r.errors]) for r in reports] == [("squeeze-cpu", []), ("cls-cpu", [])]


def test_inherited_spec_is_valid(repo: Repo) -> None:
    repo.write("specs/a.yaml", CHILD.format(base="bases/common.yaml"))
    repo.write("specs/bases/common.yaml", BASE)
    reports = check([Path("specs")], repo.root)
    assert [str(e) for r in reports for e in r.errors] == []
    assert [r.name for r in reports] == ["child"]


def test_a_size_other_than_the_model_fixes_is_a_re_declaration_not_an_error(repo: Repo) -> None:
    """Exporters write placeholder sizes into graphs that compute at any size; validation takes the
    spec's (the import stage checks the graph at it: tests/backends/passes/test_importer.py)."""
    repo.write("specs/a.yaml", edit(GOOD, {10: "    data_0: [1, 3, 224, 225]"}))
    reports = check([repo.root / "specs"], repo.root)
    assert [(r.name, [str(e) for e in r.errors]) for r in reports] == [("squeeze-cpu", [])]
