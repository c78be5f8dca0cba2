"""`npuctl report SPEC`: one self-contained HTML page about a spec's latest results.

- `data`: gathers what is recorded (lock file, stage records, store artifacts, audit history), noting
  every section it cannot fill instead of failing.
- `graph`: the placement graph laid out by topological layers, nodes coloured by device, partitions outlined.
- `charts`: Plotly figures (latency distribution, per-layer quantization sensitivity, SLO history).
- `render`: the Jinja2 template with plotly.js inlined, so the file opens offline and can be attached to a PR.
"""
