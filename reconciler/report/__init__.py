"""`npuctl report SPEC`: one self-contained HTML page about a spec's latest results.

- `data`: gathers what is recorded (lock file, stage records, store artifacts, audit history), noting
  every section it cannot fill instead of failing.
- `graph`: the placement graph as inline SVG: NPU partitions collapsed into boxes, CPU fallbacks and
  boundary transfers drawn one by one, laid out by topological layers.
- `charts`: Chart.js configurations (latency distribution, per-layer quantization sensitivity, SLO history).
- `render`: the Jinja2 template with Chart.js inlined (vendored, MIT, 210 KB), so the file opens offline,
  stays well under 1 MB and can be attached to a PR.
- `compare`: two revisions' recorded measurements and per-layer profiles side by side (`--rev A --rev B`).
"""
