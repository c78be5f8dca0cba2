"""Signed records and the trust policy, as CI sees them: a fresh clone with a key of its own.

A developer (their own key, named in the committed `npuctl-trust.yaml`) applies the digits spec with
an accuracy SLO the model misses (0.98 on the full evaluation set against a 0.99 bound) and pushes.
Then the lock is forged as anyone with write access to the repository could: the accuracy raised past
the bound, its verdict re-derived, its measurement digest deleted or recomputed; and a pull request
adds its own key to the policy and signs the forgery with it. The CI clone believes none of it; it
does believe the honest lock. The remote cache is forged the same way: a raised measurement, and a
compile record pointed at another valid object, each with every hash recomputed.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DIGITS_SPEC, copy_digits, git, run_npuctl
from tests.gitops.conftest import commit_all

pytestmark = pytest.mark.slow  # real builds in four clones, some twenty npuctl runs

UNTRUSTED = "not from a trusted builder"
RAISED = 0.995


@dataclass
class World:
    root: Path
    origin: Path
    dev: Path
    remote: Path

    def env(self, who: str) -> dict[str, str]:
        """Each person or machine has its own config dir, so its own signing key."""
        return {
            "XDG_CONFIG_HOME": str(self.root / f"config-{who}"),
            "NPUCTL_SIGNING_KEY": "",
            "NPUCTL_REMOTE": "",
        }

    def run(self, who: str, repo: Path, *args: str) -> Any:
        return run_npuctl(repo, *args, env=self.env(who))

    def ci_clone(self, name: str, branch: str) -> Path:
        dest = self.root / name
        if dest.exists():
            shutil.rmtree(dest)
        git(self.root, "clone", "-q", "-b", branch, str(self.origin), str(dest))
        git(dest, "fetch", "-q", "origin", "main:refs/remotes/origin/main")
        return dest


def _measurement_digest(m: dict[str, Any]) -> str:
    """What the lock's measurement digest is: sha256 of the canonical JSON of these five fields (a
    plain hash, which is why anyone can recompute it)."""
    signed = {k: m.get(k) for k in ("record", "value", "evidence", "detail", "runner")}
    return hashlib.sha256(json.dumps(signed, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _forge(lock_path: Path, how: str) -> None:
    lock = json.loads(lock_path.read_text())
    variant = lock["variants"]["default"]
    accuracy = variant["measurements"]["accuracy"]
    accuracy["value"] = RAISED
    if how == "digest deleted":
        del accuracy["digest"]
    else:
        accuracy["digest"] = _measurement_digest(accuracy)
    for verdict in variant["verdicts"]:
        if verdict["name"] == "accuracy.min":
            verdict.update(value=RAISED, passed=True, verdict="pass")
    lock["health"] = "Healthy"
    lock_path.write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")


def _public_key(world: World, who: str, repo: Path) -> str:
    shown = world.run(who, repo, "key", "show", "--name", who)
    assert shown.returncode == 0, shown.stderr
    found = re.search(r"key: (ed25519:\S+)", shown.stdout)
    assert found
    return found.group(1)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("trust")
    w = World(root, root / "origin.git", root / "dev", root / "remote")
    git(root, "init", "-q", "--bare", "-b", "main", str(w.origin))
    dev = w.dev
    dev.mkdir()
    git(dev, "init", "-q", "-b", "main")
    (dev / ".gitignore").write_text(".npuctl/\n")
    (dev / "specs").mkdir()
    copy_digits(dev, eval_samples=360, calib_samples=0)
    spec = DIGITS_SPEC.format(name="digits").replace("accuracy: {min: 0.5}", "accuracy: {min: 0.99}")
    (dev / "specs" / "digits.yaml").write_text(spec)
    (dev / "npuctl-trust.yaml").write_text(
        f"trusted-keys:\n  - name: dev\n    key: {_public_key(w, 'dev', dev)}\n"
    )
    applied = w.run("dev", dev, "apply", "--remote", f"file://{w.remote}")
    assert applied.returncode == 3, applied.stdout + applied.stderr  # accuracy 0.98 < 0.99, honestly
    commit_all(dev, "digits applied")
    git(dev, "remote", "add", "origin", str(w.origin))
    git(dev, "push", "-q", "origin", "main")
    lock = dev / "specs" / "digits.lock.json"
    for how in ("digest deleted", "digest recomputed"):
        branch = "forged-" + how.split()[1]
        git(dev, "checkout", "-q", "-b", branch, "main")
        _forge(lock, how)
        commit_all(dev, f"accuracy raised, {how}")
        git(dev, "push", "-q", "origin", branch)
    git(dev, "checkout", "-q", "-b", "own-key", "main")
    _forge(lock, "digest recomputed")
    data = json.loads(lock.read_text())
    for stage in data["variants"]["default"]["stages"].values():
        stage.pop("signed")
    lock.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    policy = dev / "npuctl-trust.yaml"
    policy.write_text(
        policy.read_text() + f"  - name: helpful-contributor\n    key: {_public_key(w, 'pr', dev)}\n"
    )
    signed = w.run("pr", dev, "key", "sign-locks", "--adopt-unsigned")
    assert signed.returncode == 0, signed.stdout + signed.stderr
    commit_all(dev, "trust my key")
    git(dev, "push", "-q", "origin", "own-key")
    git(dev, "checkout", "-q", "main")
    yield w


def test_the_honest_lock_is_trusted_on_a_fresh_clone_with_another_key(world: World) -> None:
    ci = world.ci_clone("ci-main", "main")
    planned = world.run("ci", ci, "plan", "--json")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    spec = json.loads(planned.stdout)["specs"][0]
    assert {s["action"] for s in spec["stages"] if not s["identity"]} == {"cached"}
    accuracy = next(v for v in spec["slo"] if v["name"] == "accuracy.min")
    assert (accuracy["verdict"], accuracy["value"] < 0.99) == ("fail", True)
    audit = world.run("ci", ci, "audit", "--spec", "digits")
    assert audit.returncode == 0 and "signed by dev" in audit.stdout, audit.stdout + audit.stderr


@pytest.mark.parametrize("branch", ["forged-deleted", "forged-recomputed"])
def test_a_raised_verdict_is_unknown_and_fails_the_gates(world: World, branch: str) -> None:
    ci = world.ci_clone("ci-" + branch, branch)
    status = world.run("ci", ci, "status", "--exit-code", "--json")
    assert status.returncode == 3, status.stdout + status.stderr
    row = json.loads(status.stdout)["specs"][0]
    accuracy = next(v for v in row["verdicts"] if v["name"] == "accuracy.min")
    assert accuracy["verdict"] == "unknown" and accuracy["value"] is None and accuracy["passed"] is None
    assert accuracy["detail"].startswith(UNTRUSTED) and "does not verify" in accuracy["detail"]
    markdown = world.run("ci", ci, "plan", "--base", "origin/main", "--format", "markdown")
    assert markdown.returncode == 2, markdown.stdout + markdown.stderr
    assert UNTRUSTED in markdown.stdout and "pass (was" not in markdown.stdout
    strict = world.run("ci", ci, "apply", "--strict")
    assert strict.returncode == 3, strict.stdout + strict.stderr  # rebuilt, measured: 0.98 < 0.99
    lock = json.loads((ci / "specs" / "digits.lock.json").read_text())
    assert lock["variants"]["default"]["measurements"]["accuracy"]["value"] < 0.99, (
        "the forged number is gone"
    )


def test_a_pull_request_adding_its_own_key_does_not_trust_its_records(world: World) -> None:
    ci = world.ci_clone("ci-own-key", "own-key")
    markdown = world.run("ci", ci, "plan", "--base", "origin/main", "--format", "markdown")
    assert markdown.returncode == 2, markdown.stdout + markdown.stderr
    assert UNTRUSTED in markdown.stdout and "a key the trust policy does not name" in markdown.stdout
    assert "edits the trust policy" in markdown.stdout and "helpful-contributor" in markdown.stdout
    after_merge = world.run("ci", ci, "plan", "--json")  # once merged, the policy names the key
    assert after_merge.returncode == 0, after_merge.stdout + after_merge.stderr


def test_forged_remote_records_are_ignored_with_one_line_each(world: World) -> None:
    ci = world.ci_clone("ci-pull", "main")
    records = world.remote / "records"
    lock = json.loads((ci / "specs" / "digits.lock.json").read_text())
    stages = lock["variants"]["default"]["stages"]
    forged = {}
    for stage in ("evaluate", "compile"):
        path = records / f"{stages[stage]['key']}.json"
        data = json.loads(path.read_text())
        if stage == "evaluate":
            data["report"]["measurements"]["accuracy"]["value"] = RAISED
        else:
            other = stages["import"]["artifacts"]["model"]  # a valid object on the remote: the float model
            name = next(iter(data["artifacts"]))
            data["artifacts"][name] = {
                **data["artifacts"][name],
                "digest": other["digest"],
                "size": other["size"],
            }
        digests = {n: a["digest"] for n, a in data["artifacts"].items()}
        out = json.dumps(
            {"artifacts": digests, "report": data["report"]}, sort_keys=True, separators=(",", ":")
        )
        data["output_digest"] = hashlib.sha256(out.encode()).hexdigest()
        path.write_text(json.dumps(data))
        forged[stage] = stages[stage]["key"]
    pulled = world.run("ci", ci, "pull", "--remote", f"file://{world.remote}", "--json")
    lines = [ln for ln in pulled.stderr.splitlines() if UNTRUSTED in ln]
    assert len(lines) == 2, pulled.stdout + pulled.stderr
    for key in forged.values():
        assert sum(key[:12] in ln for ln in lines) == 1
    result = json.loads(pulled.stdout)
    assert set(forged.values()) <= set(result["absent"]) and set(forged.values()).isdisjoint(result["done"])
