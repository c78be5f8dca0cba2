"""Typed records of what npuctl writes for others to read: lock files and every command's `--json`.

Each record is a pydantic model, and the JSON Schemas in `schemas/` are generated from them
(`python -m reconciler.records.schemas`), so the contract a script or CI job reads and the code that
writes it are one definition. Serialization keeps exactly the keys that were set (`Record.dump`), so a
record read from a file and written back is the same JSON.
"""
