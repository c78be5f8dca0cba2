"""What makes an ONNX graph unusable before any stage runs: an opset newer than the installed onnx
knows, an op of a domain no installed schema set or op table knows, nodes out of topological order
(a cycle among them). The import stage refuses a model on these, and spec validation applies the same
rules to the model's light summary, so `validate` refuses what import will.

Rules on the graph's structure only (opset imports, node domains, names): they hold on a model read
without its weights (backends.passes.skim).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

_DEFAULT_DOMAINS = ("", "ai.onnx")


@cache
def known_domains() -> frozenset[str]:
    """Domains with a schema in the installed onnx, and those the catalog's op tables list ops of
    (`com.microsoft`: ONNX Runtime's contrib ops)."""
    import onnx

    from backends import catalog

    domains = {schema.domain for schema in onnx.defs.get_all_schemas_with_history()}
    for table_id in catalog.op_tables():
        domains |= {name.split(":", 1)[0] for name in catalog.op_table(table_id).vendor_ops}
    return frozenset({*domains, *_DEFAULT_DOMAINS} - {"vendor"})


OPSET_EVERY_ONNX_KNOWS = 21
"""The newest opset of the oldest onnx npuctl accepts (pyproject: onnx>=1.16 knows opset 21): a model
at or under it is known to whatever onnx is installed, without importing onnx to ask."""


def opset_problem(opset_imports: Iterable[Any]) -> str | None:
    """The default-domain opset when the installed onnx does not know it."""
    entries = [
        e for e in opset_imports if e.domain in _DEFAULT_DOMAINS and e.version > OPSET_EVERY_ONNX_KNOWS
    ]
    if not entries:
        return None
    import onnx

    newest = onnx.defs.onnx_opset_version()
    for entry in entries:
        if entry.version > newest:
            return (
                f"opset {entry.version} is newer than the installed onnx {onnx.__version__} knows "
                f"(up to {newest}): no stage can read its ops"
            )
    return None


def domain_problem(nodes: Iterable[Any]) -> str | None:
    """The first node whose op domain nothing installed knows (the default domain needs no lookup)."""
    for node in nodes:
        if node.domain not in _DEFAULT_DOMAINS and node.domain not in (known := known_domains()):
            return (
                f"node {node.name or node.op_type} is {node.domain}:{node.op_type}, an op of a custom domain "
                f"no installed schema or op table knows ({', '.join(sorted(d for d in known if d))} are known)"
            )
    return None


def order_problem(graph: Any) -> str | None:
    """The first node that reads a tensor no earlier node, graph input or initializer produced: a
    cycle, or nodes out of topological order (ONNX requires the order; onnx.checker refuses both)."""
    available = {value.name for value in graph.input} | {init.name for init in graph.initializer}
    available |= {init.name for init in graph.sparse_initializer} | {""}
    produced_later = {out for node in graph.node for out in node.output}
    for node in graph.node:
        for name in node.input:
            if name not in available and name in produced_later:
                return (
                    f"node {node.name or node.op_type} reads {name!r} before any node produces it: the "
                    "nodes are not in topological order (or form a cycle)"
                )
        available.update(node.output)
    return None


def graph_problems(model: Any) -> list[str]:
    """Every rule above the model breaks, one line each."""
    found = (opset_problem(model.opset_import), domain_problem(model.graph.node), order_problem(model.graph))
    return [problem for problem in found if problem is not None]
