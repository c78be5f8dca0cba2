"""`npuctl audit`: which model version met which SLO, measured how, with which toolchain, and since when.

The evidence is where it is kept: the committed lock files (their git history, read through GitPython
without touching the work tree), the work tree's uncommitted lock files, and the local ledger of applies.

- `entries`: `AuditEntry`, one lock file state (a commit, the working tree, or a local apply).
- `history`: walks the lock files' git history and the work tree.
- `ledger`: local applies from the ledger, matched to commits where they were committed.
- `query`: filters, the model-version x SLO summary, and the current failing streak per spec.
- `render`: text, Markdown and JSON.
"""

from reconciler.audit.entries import AuditEntry
from reconciler.audit.query import Audit, Filters, run

__all__ = ["Audit", "AuditEntry", "Filters", "run"]
