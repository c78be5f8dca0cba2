"""Who built and measured a record, and whether this repository counts it: signing keys, the trust
policy, and the signatures on lock-file stage records and remote cache records.

- `keys`: this machine's (or person's, or CI's) ed25519 signing key, kept outside the repository.
- `policy`: `npuctl-trust.yaml` at the repository root, the public keys whose records count.
- `signing`: what a signature covers, and `Trust`, the one place that says whether a record counts.
"""
