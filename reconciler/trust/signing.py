"""What a signature covers, and `Trust`: whether a record counts here.

A lock file's stage record is signed over the canonical JSON (the form its key is a digest of) of
the stage's name, the record without its `signed` field, and the variant's measurements that name
the record (`record`: its key; evaluate's also covers those naming no recorded stage), so neither a stage's artifacts nor a measured figure can be changed
without the signer's key. Verdicts are not signed: they are re-derived from the signed measurements
and the spec's thresholds on every read (reconciler.engine.integrity). A remote cache record is
signed over its canonical JSON without `signed`.

A record counts when it is signed by a key the trust policy names or by this machine's own key (a
machine trusts what it built itself; a fresh CI clone has a key of its own, so it trusts only the
policy). Anything else (unsigned, an unknown key, a signature that does not verify) is not from a
trusted builder: never a pass, rebuilt where it can be.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backends.sdk.vocab import UNTRUSTED, Verdict
from reconciler.engine.keys import canonical
from reconciler.trust import keys
from reconciler.trust.policy import Policy

THIS_MACHINE = "this machine"
"""The signer name of this machine's own key when the policy does not name it."""


def mapping(value: Any) -> dict[str, Any]:
    """`value` when it is an object, else {} (what a malformed lock entry reads as)."""
    return value if isinstance(value, dict) else {}


ARTIFACT_INPUTS = "artifact_inputs"
"""The variant's record of the inputs its compiled artifact declares (from compile's report): compile's
signature covers it."""


def stage_payload(
    stage: str, stages: dict[str, Any], measurements: dict[str, Any], declared: Any = None
) -> bytes:
    """What the signature of `stages[stage]` covers: the entry without `signed`, the measurements it
    vouches for (`owned`), and for compile the variant's `artifact_inputs` when it has them."""
    entry = mapping(stages.get(stage))
    record = {k: v for k, v in entry.items() if k != "signed"}
    payload = {"stage": stage, "record": record, "measurements": owned(stage, stages, measurements)}
    if stage == "compile" and declared is not None:
        payload[ARTIFACT_INPUTS] = declared
    return canonical(payload).encode()


def owned(stage: str, stages: dict[str, Any], measurements: dict[str, Any]) -> dict[str, Any]:
    """The measurements a stage's signature covers: those naming its key (`record`), and for evaluate,
    which carries the variant's measurements, also those naming no recorded stage (an estimate kept
    from an earlier check whose stage key has since moved)."""
    keys = {mapping(e).get("key") for e in stages.values()}
    key = mapping(stages.get(stage)).get("key")
    return {
        name: m
        for name, m in sorted(measurements.items())
        if mapping(m).get("record") == key or (stage == "evaluate" and mapping(m).get("record") not in keys)
    }


def record_payload(data: dict[str, Any]) -> bytes:
    return canonical({k: v for k, v in data.items() if k != "signed"}).encode()


def short(key: str) -> str:
    return key[: len(keys.PREFIX) + 12] + "…"


@dataclass
class Trust:
    policy: Policy
    own: keys.SigningKey | None = None
    """This machine's key, once read or made (signing makes it on first need)."""
    _seen: dict[tuple[str, str, bytes], str | None] = field(default_factory=dict, repr=False)

    @classmethod
    def here(cls, policy: Policy) -> Trust:
        """The policy with this machine's key, if it has one yet (none is made just to read)."""
        return cls(policy, keys.machine_key(create=False))

    def signer(self, key: str) -> str | None:
        """The name a trusted key goes by; None for a key that is not trusted here. This machine's
        own key is recognised without reading the policy (which may name it too)."""
        own = self.own is not None and self.own.public.text == key
        named = self.policy.name_of(key) if not own or self.policy.given is not None else None
        if named is not None:
            return named
        return THIS_MACHINE if own else None

    def problem(self, signed: Any, payload: bytes) -> str | None:
        """None when `signed` is a trusted key's valid signature of `payload`; else why not, starting
        with UNTRUSTED."""
        if not isinstance(signed, dict) or not signed:
            return f"{UNTRUSTED} (unsigned)"
        key, sig = signed.get("key"), signed.get("sig")
        if not isinstance(key, str) or not isinstance(sig, str):
            return f"{UNTRUSTED} (malformed signature)"
        memo = (key, sig, payload)
        if memo not in self._seen:
            self._seen[memo] = self._check(key, sig, payload)
        return self._seen[memo]

    def _check(self, key: str, sig: str, payload: bytes) -> str | None:
        if self.signer(key) is None:
            return f"{UNTRUSTED} (signed by {short(key)}, a key the trust policy does not name)"
        try:
            public = keys.PublicKey.parse(key)
        except keys.KeyProblem:
            return f"{UNTRUSTED} (malformed signing key)"
        if not public.verifies(sig, payload):
            return f"{UNTRUSTED} (the signature of {self.signer(key)} does not verify: changed after signing)"
        return None

    def sign(self, payload: bytes) -> dict[str, str]:
        if self.own is None:
            self.own = keys.machine_key(create=True)
        assert self.own is not None
        return {"key": self.own.public.text, "sig": self.own.sign(payload)}

    def fingerprint(self) -> list[str | None]:
        """What a cached judgement of trust depends on: the policy's text and this machine's key."""
        policy = self.policy.text or canonical(self.policy.given or {})
        return [policy, self.own.public.text if self.own is not None else None]

    # lock files -------------------------------------------------------------------------------------
    def distrusted(self, variant: dict[str, Any]) -> dict[str, str]:
        """Stage name -> why its record in this lock variant does not count ({}: all count). A
        measurement naming no recorded stage makes evaluate's (which carries the measurements) not count."""
        stages = mapping(variant.get("stages"))
        measured = mapping(variant.get("measurements"))
        out: dict[str, str] = {}
        for name, entry in sorted(stages.items()):
            payload = stage_payload(str(name), stages, measured, variant.get(ARTIFACT_INPUTS))
            why = self.problem(mapping(entry).get("signed"), payload)
            if why is not None:
                out[str(name)] = why
        if "evaluate" not in stages and owned("evaluate", stages, measured):
            out["evaluate"] = f"{UNTRUSTED} (measurements that no signed record vouches for)"
        return out

    def signed_stages(
        self,
        stages: dict[str, dict[str, Any]],
        measurements: dict[str, Any],
        before: dict[str, Any],
        fresh: bool = True,
        declared: Any = None,
    ) -> dict[str, dict[str, Any]]:
        """The stage entries of a variant about to be written, each signed: a signature the committed
        entry (`before`: its stages) already holds over the same content is kept, so a machine that
        rebuilt nothing changes no byte and the original signer stays named; anything else is signed
        by this machine (every record that reaches a lock counts here: built here, or trusted). Without
        `fresh` (a dry walk, which only compares) nothing new is signed: such an entry differs from the
        committed one, which is all the walk needs to know."""
        out = {}
        for name, entry in stages.items():
            payload = stage_payload(name, stages, measurements, declared)
            old = mapping(before.get(name))
            kept = old.get("signed")
            if kept and self.problem(kept, payload) is None:
                signed = kept
            else:
                signed = self.sign(payload) if fresh else {"key": "", "sig": "to be signed"}
            out[name] = {**entry, "signed": signed}
        return out

    def vetted(self, lock: dict[str, Any] | None) -> dict[str, Any] | None:
        """The lock with the verdicts of every variant whose records do not count read as `unknown`,
        no value, their detail saying why (for views that read verdicts off a lock file)."""
        if lock is None or not isinstance(lock.get("variants"), dict):
            return lock
        variants = {}
        for name, entry in lock["variants"].items():
            why = next(iter(self.distrusted(entry).values()), None) if isinstance(entry, dict) else None
            if why is not None:
                verdicts = [
                    {
                        **v,
                        "value": None,
                        "passed": None,
                        "evidence": None,
                        "verdict": Verdict.UNKNOWN.word,
                        "detail": why,
                    }
                    for v in entry.get("verdicts") or []
                    if isinstance(v, dict)
                ]
                entry = {**entry, "verdicts": verdicts}
            variants[name] = entry
        return {**lock, "variants": variants}

    def signers(self, variant: dict[str, Any]) -> list[str]:
        """Who vouches for the variant's measurements: the names of the keys that signed the stages
        owning them (a key not trusted here is shown shortened, "unsigned" for none)."""
        stages, measured = mapping(variant.get("stages")), mapping(variant.get("measurements"))
        names = set()
        for name, entry in stages.items():
            if owned(name, stages, measured):
                key = mapping(mapping(entry).get("signed")).get("key")
                names.add(self.signer(key) or short(key) if isinstance(key, str) else "unsigned")
        return sorted(names)

    # remote cache records ---------------------------------------------------------------------------
    def remote_problem(self, data: dict[str, Any]) -> str | None:
        return self.problem(data.get("signed"), record_payload(data))

    def sign_record(self, data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "signed": self.sign(record_payload(data))}
