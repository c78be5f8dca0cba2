"""Git-aware workflows: specs and lock files at another revision, read without touching the work tree.

- `gitref`: open the repository, resolve a ref, materialize the specs and lock files of a commit into a
  temporary folder mirroring the repository (blob contents only; work tree and index untouched).
- `specdiff`: the field-level difference between two versions of a spec, with the stages each field feeds.
- `slo`: the SLO table old / new / delta between two lock files.
- `compare`: `plan --base REF` per spec: added / removed / modified, field diff, stages, SLO deltas.
- `render`: that comparison as text, Markdown (a pull-request comment) and JSON.

GitPython is imported lazily: `npuctl plan` without `--base` never loads it.
"""
