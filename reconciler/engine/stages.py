"""The stage graph: what each stage reads. This table is the whole of the engine's domain knowledge.

A stage's build key covers exactly: its `reads` (spec fields), the digests of its `files`, the output
digests of the upstream artifacts it `uses`, the target's catalog entry when it reads `target`, and
its implementation's version and toolchain fingerprint. `slo` is read by no stage: verify re-judges.
A stage's `files` are not listed here: it reads the file or folder of every path field it reads
(the fields declared with SpecPath on the spec models, reconciler.spec.pathfields).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.spec.pathfields import PATH_FIELDS, PathField

Config = Mapping[str, Any]


@dataclass(frozen=True)
class Stage:
    name: str
    reads: tuple[str, ...]
    """Spec field paths under `spec.` whose JSON values enter the key and the request config."""
    uses: Mapping[str, tuple[str, str | None]] = field(default_factory=dict)
    """Request input name -> (upstream stage, artifact name); artifact None passes all its artifacts."""
    active: Callable[[Config], bool] = lambda config: True
    """False means nothing to do: the stage is an identity that passes its `uses` inputs through."""
    idle_reason: str = ""
    when: Mapping[str, Callable[[Config], bool]] = field(default_factory=dict)
    """Read paths that enter the key (and the request) only when their predicate holds on the stage's
    other reads and the path's own value: quantize reads the evaluation set only for the auto search."""
    files: Mapping[str, PathField] = field(init=False)
    """Request input name -> path field whose file or folder's content digest enters the key: every
    declared path field that one of `reads` covers (reading a path reads what it names)."""

    def __post_init__(self) -> None:
        files = {f.input: f for f in PATH_FIELDS if any(_covers(r, f.dotted) for r in self.reads)}
        object.__setattr__(self, "files", files)

    def wants(self, name: str, config: Config) -> bool:
        """Whether a read path, or a file input, enters the key for this config: a file input does when a
        read covering its field does."""
        if name in self.files:
            return any(self.wants(r, config) for r in self.reads if _covers(r, self.files[name].dotted))
        predicate = self.when.get(name)
        return predicate is None or predicate(config)


def _covers(read: str, field_path: str) -> bool:
    return field_path == read or field_path.startswith(read + ".")


def _get(config: Config, path: str) -> Any:
    return config.get(path)


def _auto_search(config: Config) -> bool:
    """The quantize stage's auto sensitive-layer search measures on the evaluation set (one data set
    for one number), so that set enters quantize's key only when the search runs. The declared task
    always does: the stage's own check of its artifact reads the outputs the way the task says."""
    quantization = _get(config, "quantization") or {}
    sensitive = quantization.get("sensitive_layers") or {}
    return quantization.get("mode") == "ptq" and sensitive.get("auto") is not None


_EVAL_SET = ("evaluate.data", "evaluate.labels", "evaluate.task", "evaluate.metric")


def _rewriting(config: Config) -> bool:
    return bool((_get(config, "rewrite") or {}).get("replace_unsupported"))


def _disabling(config: Config) -> bool:
    """The stages that convert (quantize on a TFLite path, compile on Core ML's and RKNN's) apply the
    converter forms unless `rewrite.disable` names them: the field enters their key only when it names
    something, so a spec without it keeps the key it had."""
    return bool(_get(config, "rewrite.disable"))


_REWRITE_SAMPLES = ("preprocess", "quantization.calibration.data", "evaluate.data")
"""What the rewrite stage verifies on: the spec's samples (calibration first, else evaluation), through
the preprocess section when the samples are raw frames."""


STAGES: tuple[Stage, ...] = (
    Stage(
        "import",
        reads=("model.path", "model.package", "inputs"),
    ),
    Stage(
        "check",
        reads=("target", "quantization.mode", "quantization.weights", "quantization.activations"),
        uses={"model": ("import", "model")},
    ),
    Stage(
        "rewrite",
        reads=("rewrite", "target", *_REWRITE_SAMPLES),
        uses={"model": ("import", "model"), "placement": ("check", "placement")},
        active=_rewriting,
        idle_reason="identity: rewrite.replace_unsupported is false",
        when={name: _rewriting for name in _REWRITE_SAMPLES},
    ),
    Stage(
        "preprocess",
        reads=("preprocess", "inputs"),
        uses={"model": ("rewrite", "model")},
        active=lambda c: _get(c, "preprocess") is not None,
        idle_reason="identity: no preprocess section",
    ),
    Stage(
        "quantize",
        reads=("quantization", "target", *_EVAL_SET, "rewrite.disable"),
        uses={"model": ("preprocess", "model"), "float_model": ("preprocess", "model")},
        active=lambda c: (_get(c, "quantization") or {}).get("mode", "none") != "none",
        idle_reason="identity: quantization.mode is none",
        # the task is how its own check reads the outputs; the data only when the auto search measures
        when={
            **{name: _auto_search for name in _EVAL_SET if name != "evaluate.task"},
            "rewrite.disable": _disabling,
        },
    ),
    Stage(
        "compile",
        # evaluate.data: its first samples check the artifact against its source, read the way
        # evaluate.task says (a simulator's int8 build); float_model: an int8 build is also judged
        # against the float model beside the CPU int8 model
        reads=(
            "target",
            "compile",
            "rewrite.fusion",
            "quantization.mode",
            "evaluate.data",
            "evaluate.task",
            "rewrite.disable",
        ),
        uses={"model": ("quantize", "model"), "float_model": ("preprocess", "model")},
        when={"rewrite.disable": _disabling},
    ),
    Stage(
        "evaluate",
        reads=("target", "evaluate"),
        uses={
            "compiled": ("compile", None),
            "model": ("quantize", "model"),
            "float_model": ("preprocess", "model"),
            "placement": ("rewrite", "placement"),
        },
    ),
)

BY_NAME: dict[str, Stage] = {stage.name: stage for stage in STAGES}
ORDER: tuple[str, ...] = tuple(stage.name for stage in STAGES)
VERIFY = "verify"
"""The last step: judges SLOs on recorded measurements; never builds, never measures, has no key."""


def used_by(name: str) -> list[str]:
    """The stages that take `name`'s output as an input."""
    return [stage.name for stage in STAGES if any(source == name for source, _ in stage.uses.values())]


def readers(field_path: str, spec: Mapping[str, Any] | None = None) -> list[str]:
    """Stages whose key covers a spec field (itself, a parent or a child of it). Given the spec's JSON
    (`spec:` section), a conditional read counts only where its predicate holds for that spec."""
    out = []
    for stage in STAGES:
        config = None if spec is None else {p: _lookup(spec, p) for p in stage.reads}
        paths = [p for p in stage.reads if config is None or stage.wants(p, config)]
        paths += [f.dotted for name, f in stage.files.items() if config is None or stage.wants(name, config)]
        if any(_overlaps(field_path, p) for p in paths):
            out.append(stage.name)
    return out


def _lookup(spec: Mapping[str, Any], path: str) -> Any:
    node: Any = spec
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")
