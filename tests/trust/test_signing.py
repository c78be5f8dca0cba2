"""Which lock records count: signed by a trusted key over exactly what they record, or not at all."""

from __future__ import annotations

import copy
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from reconciler.engine import keys, measurements
from reconciler.trust.keys import SigningKey
from reconciler.trust.policy import Policy
from reconciler.trust.signing import THIS_MACHINE, Trust


def _key() -> SigningKey:
    return SigningKey(Ed25519PrivateKey.generate(), "made for this test")


def _variant(trust: Trust) -> dict[str, Any]:
    """A variant as apply writes it: two stages, evaluate's measurement naming its record, signed."""
    inputs = {"stage": "evaluate", "fields": {"runs": 5}}
    evaluate = {"key": keys.digest(inputs), "artifacts": {}, "identity": False, "impl": {}, "inputs": inputs}
    check_inputs = {"stage": "check"}
    check = {
        "key": keys.digest(check_inputs),
        "artifacts": {},
        "identity": False,
        "impl": {},
        "inputs": check_inputs,
    }
    accuracy = {"value": 0.9806, "evidence": "measured:host", "record": evaluate["key"], "detail": "top1"}
    accuracy["digest"] = measurements.digest(accuracy)
    measured = {"accuracy": accuracy}
    stages = trust.signed_stages({"check": check, "evaluate": evaluate}, measured, {})
    return {"stages": stages, "measurements": measured, "verdicts": []}


def test_what_this_machine_signed_counts_here_and_where_the_policy_names_its_key() -> None:
    mine = Trust(Policy(), _key())
    variant = _variant(mine)
    assert mine.distrusted(variant) == {}
    assert mine.signers(variant) == [THIS_MACHINE]
    assert mine.own is not None
    ci = Trust(Policy({mine.own.public.text: "dev laptop"}), _key())
    assert ci.distrusted(variant) == {} and ci.signers(variant) == ["dev laptop"]
    stranger = Trust(Policy(), _key())
    assert set(stranger.distrusted(variant)) == {"check", "evaluate"}
    assert "a key the trust policy does not name" in stranger.distrusted(variant)["evaluate"]


def test_a_raised_measurement_does_not_verify_with_its_digest_deleted_or_recomputed() -> None:
    trust = Trust(Policy(), _key())
    for forge in ("delete", "recompute"):
        variant = copy.deepcopy(_variant(trust))
        accuracy = variant["measurements"]["accuracy"]
        accuracy["value"] = 0.995
        if forge == "delete":
            del accuracy["digest"]
        else:
            accuracy["digest"] = measurements.digest(accuracy)
        why = trust.distrusted(variant)
        assert set(why) == {"evaluate"}, forge
        assert (
            why["evaluate"].startswith("not from a trusted builder") and "does not verify" in why["evaluate"]
        )


def test_an_unsigned_record_and_a_measurement_no_record_vouches_for_do_not_count() -> None:
    trust = Trust(Policy(), _key())
    variant = _variant(trust)
    unsigned = copy.deepcopy(variant)
    del unsigned["stages"]["check"]["signed"]
    assert trust.distrusted(unsigned) == {"check": "not from a trusted builder (unsigned)"}
    orphan = copy.deepcopy(variant)
    del orphan["stages"]["evaluate"]
    assert "evaluate" in trust.distrusted(orphan), "accuracy now names no stage: nobody vouches for it"


def test_rewriting_a_variant_keeps_the_signatures_over_unchanged_content() -> None:
    """A machine that rebuilt nothing changes no byte of the lock, and the original signer stays named."""
    dev = Trust(Policy(), _key())
    variant = _variant(dev)
    assert dev.own is not None
    ci = Trust(Policy({dev.own.public.text: "dev"}), _key())
    unsigned = {n: {k: v for k, v in s.items() if k != "signed"} for n, s in variant["stages"].items()}
    again = ci.signed_stages(unsigned, variant["measurements"], variant["stages"])
    assert again == variant["stages"]
    changed = {**variant["measurements"], "accuracy": {**variant["measurements"]["accuracy"], "value": 0.5}}
    resigned = ci.signed_stages(unsigned, changed, variant["stages"])
    assert ci.own is not None
    assert resigned["evaluate"]["signed"]["key"] == ci.own.public.text
    assert resigned["check"]["signed"] == variant["stages"]["check"]["signed"]


def test_the_inputs_a_compiled_artifact_declares_are_covered_by_compile_s_signature() -> None:
    trust = Trust(Policy(), _key())
    inputs = {"stage": "compile"}
    compile_ = {"key": keys.digest(inputs), "artifacts": {}, "identity": False, "impl": {}, "inputs": inputs}
    declared = [{"name": "image", "shape": [1, 3, 224, 224]}]
    stages = trust.signed_stages({"compile": compile_}, {}, {}, declared=declared)
    variant = {"stages": stages, "measurements": {}, "artifact_inputs": declared}
    assert trust.distrusted(variant) == {}
    variant["artifact_inputs"] = [{"name": "image", "shape": [1, 3, 640, 640]}]
    assert set(trust.distrusted(variant)) == {"compile"}
