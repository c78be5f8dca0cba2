"""The rewrite stage: what the target cannot run replaced by equivalents it can, verified numerically.

- stage: the pass (candidates per the target's op table, applied, verified, rolled back on failure);
- verify: the numeric check of a candidate against the model before it;
- graph_edit: the graph surgery the stage and its rules share;
- rules: the rewrite library, one module per family of rules.
"""
