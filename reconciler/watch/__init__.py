"""`npuctl watch`: debounced file watching that re-plans and applies only what changed.

- `inputs`: which files and folders a spec reads (spec file, `extends` bases, model, data) and which
  specs a changed path affects.
- `debounce`: a burst of events (many saves, an editor's write-temp-then-rename) becomes one batch.
- `observe`: watchdog observers on the folders holding those inputs, kept in sync as specs change.
- `runner`: apply as a subprocess (`python -m reconciler apply --json SPEC`), so a newer change can
  cancel it by killing it; the engine is crash-safe, so a killed apply leaves consistent state.
- `status`: one status line per spec (rich Live on a terminal, plain or JSON lines otherwise).
- `watcher`: the loop (`Watcher.run(stop_event)`), with Flux's error classes: an invalid spec is
  terminal (not retried until it changes), a failed build is transient (retried with backoff).
"""

from reconciler.watch.watcher import Watcher, WatchOptions

__all__ = ["WatchOptions", "Watcher"]
