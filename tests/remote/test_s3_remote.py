"""The remote cache on an S3 API: moto's standalone server (an S3 API emulator, not S3) on 127.0.0.1,
started by the test. Explicit push and pull, and a flipped byte on the remote caught and rebuilt."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import jsonschema
import pytest

from tests.conftest import ROOT, git, run_npuctl
from tests.remote.conftest import S3, clone, commit, digits_specs, lock_bytes, lock_digests, stored

pytestmark = pytest.mark.slow


def test_push_pull_and_a_flipped_byte_on_the_remote_is_caught_and_rebuilt(
    s3_emulator: S3, tmp_path: Path
) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    git(dev, "init", "-q", "-b", "main")
    (dev / ".gitignore").write_text(".npuctl/\n")
    (dev / "specs").mkdir()
    digits_specs(dev, 2)
    (dev / ".npuctl.yaml").write_text(
        f"remote:\n  url: s3://{s3_emulator.bucket}/team\n  options: {{endpoint_url: '{s3_emulator.endpoint}'}}\n"
    )
    assert run_npuctl(dev, "apply", "--remote", "none").returncode == 0  # built without the remote
    commit(dev)
    pushed = run_npuctl(dev, "push", "--json")
    assert pushed.returncode == 0, pushed.stderr
    report = json.loads(pushed.stdout)
    schema = json.loads((ROOT / "schemas" / "remote-sync.schema.json").read_text())
    jsonschema.validate(report, schema)
    assert len(report["done"]) == 3 + 2 and report["absent"] == []
    s3 = s3_emulator.client()
    names = [o["Key"] for o in s3.list_objects_v2(Bucket=s3_emulator.bucket)["Contents"]]
    assert len([n for n in names if n.startswith("team/records/")]) == 5
    again = json.loads(run_npuctl(dev, "push", "--json").stdout)
    assert again["done"] == [] and len(again["present"]) == 5

    fresh = clone(dev, tmp_path / "fresh")
    pulled = run_npuctl(fresh, "pull")
    assert pulled.returncode == 0, pulled.stderr
    assert "5 pulled" in pulled.stdout
    assert lock_digests(dev) <= stored(fresh)
    applied = run_npuctl(fresh, "apply", "--json")
    stages = [s for spec in json.loads(applied.stdout)["specs"] for s in spec["stages"]]
    assert applied.returncode == 0 and {s["action"] for s in stages} == {"cached"}
    assert lock_bytes(fresh) == lock_bytes(dev)

    # One byte of the compiled model flipped on the remote.
    compile_stage = json.loads((dev / "specs" / "digits-0.lock.json").read_text())["variants"]["default"][
        "stages"
    ]["compile"]
    digest = next(iter(compile_stage["artifacts"].values()))["digest"]
    name = f"team/objects/{digest[:2]}/{digest[2:]}"
    data = bytearray(s3.get_object(Bucket=s3_emulator.bucket, Key=name)["Body"].read())
    data[len(data) // 2] ^= 0x40
    s3.put_object(Bucket=s3_emulator.bucket, Key=name, Body=bytes(data))

    second = clone(dev, tmp_path / "second")
    rebuilt = run_npuctl(second, "apply", "--json")
    assert rebuilt.returncode == 0, rebuilt.stderr
    warnings = [line for line in rebuilt.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and f"object {digest[:12]} does not verify" in warnings[0]
    result = json.loads(rebuilt.stdout)["specs"]
    actions = {(spec["name"], s["name"]): s["action"] for spec in result for s in spec["stages"]}
    assert actions[("digits-0", "compile")] == "built"
    assert actions[("digits-0", "evaluate")] == "cached"  # same compiled bytes: early cutoff
    assert lock_bytes(second) == lock_bytes(dev)
    assert digest in stored(second)
    repaired = s3.get_object(Bucket=s3_emulator.bucket, Key=name)["Body"].read()
    assert hashlib.sha256(repaired).hexdigest() == digest  # the rebuild's push replaced the bad copy

    # A measurement raised on the remote, every hash recomputed: its signature no longer verifies.
    evaluate = json.loads((dev / "specs" / "digits-1.lock.json").read_text())["variants"]["default"][
        "stages"
    ]["evaluate"]["key"]
    name = f"team/records/{evaluate}.json"
    record = json.loads(s3.get_object(Bucket=s3_emulator.bucket, Key=name)["Body"].read())
    record["report"]["measurements"]["accuracy"]["value"] = 1.0
    digests = {n: a["digest"] for n, a in record["artifacts"].items()}
    canonical = json.dumps(
        {"artifacts": digests, "report": record["report"]}, sort_keys=True, separators=(",", ":")
    )
    record["output_digest"] = hashlib.sha256(canonical.encode()).hexdigest()
    s3.put_object(Bucket=s3_emulator.bucket, Key=name, Body=json.dumps(record).encode())
    third = clone(dev, tmp_path / "third")
    pulled = run_npuctl(third, "pull")
    lines = [line for line in pulled.stderr.splitlines() if "not from a trusted builder" in line]
    assert len(lines) == 1 and evaluate[:12] in lines[0] and "does not verify" in lines[0], pulled.stderr
