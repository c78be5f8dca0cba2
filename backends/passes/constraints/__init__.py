"""Evaluates an op table row's verbatim constraint text against one node.

Vendor tables state restrictions in prose ("NPU: int8/fp16; 4-D; axis in {0,1,2,3}"). The text is split
into clauses; each clause is matched against a library of parsers for the phrasings the shipped tables
use (dtype lists, ranks, axes, attribute values, kernel/stride/pad ranges, constant inputs, arities).
A clause no parser understands is reported as "not evaluated: <clause>", never guessed: the node keeps
its table placement and the report says which clauses were not checked.

Layout: `_clauses` splits the text, `_registry` tries each clause against the rules in a fixed order,
`_view` is what a rule sees of the node; the rules live in one module per family of phrasings.
"""

# Importing a rule module registers its rules; _registry.FAMILIES fixes the order they are tried in.
from backends.passes.constraints import _attributes, _conditional, _dtypes, _inputs, _notes, _ranges, _shapes  # noqa: F401
from backends.passes.constraints._clauses import split_clauses
from backends.passes.constraints._registry import evaluate, summarize
from backends.passes.constraints._view import FAILED, INFO, NOT_EVALUATED, OK, Context, Verdict

__all__ = [
    "FAILED",
    "INFO",
    "NOT_EVALUATED",
    "OK",
    "Context",
    "Verdict",
    "evaluate",
    "split_clauses",
    "summarize",
]
