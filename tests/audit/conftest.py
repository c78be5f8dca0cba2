"""Lock files written by hand (valid against the lock schema) committed into real git repositories."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from reconciler.trust import keys
from reconciler.trust.policy import Policy
from reconciler.trust.signing import Trust
from tests.conftest import git


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def verdict(
    name: str, value: float, threshold: float, comparison: str = "<=", evidence: str = "measured:host"
) -> dict[str, Any]:
    met = value <= threshold if comparison == "<=" else value >= threshold
    return {
        "name": name,
        "variant": "default",
        "threshold": threshold,
        "comparison": comparison,
        "value": value,
        "passed": met,
        "evidence": evidence,
        "verdict": "pass" if met else "fail",
        "detail": "",
    }


def lock(
    spec: str = "digits",
    target: str = "cpu",
    version: str = "v1",
    model_file: str = "model-v1",
    latency: float = 1.0,
    accuracy: float = 0.97,
    ort: str = "1.32.0",
) -> dict[str, Any]:
    """A lock file: the import digest follows the model file, the compile stage carries the ORT version."""
    imported = sha("imported " + model_file)
    impl = {"name": "backends.onnxruntime.Compile", "version": "1", "fingerprint": {"onnxruntime": ort}}
    stages = {
        "import": {
            "key": sha("import-key " + model_file),
            "artifacts": {"model": {"digest": imported, "file": "model.onnx", "size": 10}},
            "identity": False,
            "inputs": {},
            "impl": {
                "name": "backends.onnx.importer.ImportPass",
                "version": "1",
                "fingerprint": {"onnx": "1.23.2"},
            },
        },
        "quantize": {
            "key": sha("q" + model_file),
            "artifacts": {},
            "identity": True,
            "inputs": {},
            "impl": {"name": "identity"},
        },
        "compile": {
            "key": sha(f"compile {model_file} {ort}"),
            "artifacts": {},
            "identity": False,
            "inputs": {},
            "impl": impl,
        },
    }
    verdicts = [verdict("latency_ms.p90", latency, 5.0), verdict("accuracy.min", accuracy, 0.9, ">=")]
    return {
        "format_version": 2,
        "spec": spec,
        "file": f"{spec}.yaml",
        "target": target,
        "model": {"version": version, "import_key": stages["import"]["key"]},
        "slo": {"latency_ms": {"p90": 5.0}, "accuracy": {"min": 0.9}},
        "sync": "Synced",
        "health": "Healthy" if all(v["passed"] for v in verdicts) else "Degraded",
        "variants": {
            "default": {
                "inputs": {"image": [1, 1, 8, 8]},
                "stages": stages,
                "measurements": {},
                "verdicts": verdicts,
            }
        },
        "sources": {"spec_digest": sha("spec " + spec + version), "files": {"model": sha(model_file)}},
    }


def signed(data: dict[str, Any]) -> dict[str, Any]:
    """The lock with its stage records signed by this machine's key, as apply signs them: audit
    counts only records from a trusted builder (reconciler.trust)."""
    trust = Trust(Policy(), keys.machine_key())
    for variant in data["variants"].values():
        unsigned = {n: {k: v for k, v in s.items() if k != "signed"} for n, s in variant["stages"].items()}
        variant["stages"] = trust.signed_stages(unsigned, variant["measurements"], {})
    return data


def write_lock(repo: Path, data: dict[str, Any]) -> Path:
    data = signed(data)
    path = repo / "specs" / f"{data['spec']}.lock.json"
    path.write_text(json.dumps(data, sort_keys=True, indent=2) + "\n")
    return path


def commit(repo: Path, message: str, date: str | None = None) -> str:
    git(repo, "add", "-A")
    env_date = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date} if date else {}
    saved = {k: os.environ.get(k) for k in env_date}
    os.environ.update(env_date)
    try:
        git(repo, "commit", "-q", "--allow-empty", "-m", message)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return git(repo, "rev-parse", "HEAD").strip()
