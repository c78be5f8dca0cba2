"""Which spec an executor starts next: by dependency and expected cost, one build per device at a time.

- Expected cost is what the ledger recorded: the durations of the spec's last builds (a spec never
  built counts as the costliest known, so it starts early). Longest first keeps the last worker from
  finishing long after the others.
- Dependency: specs over the same model and input shapes share their first stages' keys. The first of
  each such group goes in cost order; the others follow every group's first, so they find the shared
  stages built (or wait on their key lock for less time) instead of holding a worker while blocked.
- A spec measured on a device (evaluate.runner ssh:// or adb://) never runs beside another spec on the
  same runner URL: two benchmarks on one board would measure each other.
- A backend's toolchain may be installed on some nodes only: `needs` names the backend (and `managed`
  says its toolchain is a managed environment, installed machine by machine), and the Ray executor
  places the spec on a node that declares it (reconciler.engine.ray_executor).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from reconciler.engine.workspace import Workspace
from reconciler.spec import LoadedSpec

T = TypeVar("T")
H = TypeVar("H")

DEVICE_SCHEMES = ("ssh://", "adb://")


@dataclass(frozen=True)
class Placement:
    cost_ms: float
    group: str
    """Specs with the same group share their first stages (same model file and input shapes)."""
    device: str | None = None
    """The runner URL evaluate measures on, when it is a device."""
    needs: str | None = None
    """The backend whose toolchain must be installed where the spec runs."""
    managed: bool = False
    """Its toolchain is a managed environment (`managed_toolchain`), not part of npuctl's install."""


def recorded_cost(ws: Workspace, spec: str) -> float | None:
    """The sum of the last recorded build duration of each of the spec's stages; None if never built."""
    last: dict[tuple[str, str], float] = {}
    for row in ws.db.ledger(spec):
        if row["action"] == "built" and row["duration_ms"]:
            last[(row["variant"], row["stage"])] = float(row["duration_ms"])
    return sum(last.values()) if last else None


def placement(ws: Workspace, spec: LoadedSpec, cost_ms: float) -> Placement:
    runner = spec.field("evaluate.runner")
    device = runner if isinstance(runner, str) and runner.startswith(DEVICE_SCHEMES) else None
    model = spec.field("model.path")
    group = json.dumps([str(model), spec.field("inputs")], sort_keys=True, default=str)
    return Placement(cost_ms, group, device, *_backend(spec))


def _backend(spec: LoadedSpec) -> tuple[str | None, bool]:
    """The name of the backend that builds `spec`, and whether its toolchain is a managed environment."""
    from backends import registry
    from backends.catalog import targets
    from backends.sdk.errors import BackendError

    target = targets().get(spec.target)
    if target is None:
        return None, False
    override = (spec.field("compile") or {}).get("backend")
    try:
        backend = registry.backend_for(target, override if isinstance(override, str) else None)
    except BackendError:
        return target.backend, False
    return backend.name, isinstance(getattr(backend, "managed_toolchain", None), str)


def placements(ws: Workspace, specs: list[LoadedSpec]) -> list[Placement]:
    costs = [recorded_cost(ws, s.name) for s in specs]
    known = [c for c in costs if c is not None]
    unknown = max(known) if known else 0.0
    return [placement(ws, s, unknown if c is None else c) for s, c in zip(specs, costs, strict=True)]


def order(places: list[Placement]) -> list[int]:
    """Indexes in start order: each group's first member by cost, then the others by cost."""
    by_cost = sorted(range(len(places)), key=lambda i: (-places[i].cost_ms, i))
    seen: set[str] = set()
    first: list[int] = []
    rest: list[int] = []
    for i in by_cost:
        (rest if places[i].group in seen else first).append(i)
        seen.add(places[i].group)
    return first + rest


def dispatch(
    items: list[T],
    places: list[Placement],
    slots: int,
    submit: Callable[[int, T], H],
    wait: Callable[[list[H]], tuple[H, Any]],
) -> Iterator[tuple[int, Any]]:
    """Runs `items` through `submit` with at most `slots` in flight, in `order`, never two on one
    device; `wait` returns one finished handle and its result. Yields (index, result) as they finish."""
    queue = order(places)
    busy: set[str] = set()
    flight: dict[Any, int] = {}
    while queue or flight:
        started = True
        while started and len(flight) < slots:
            started = False
            for position, i in enumerate(queue):
                device = places[i].device
                if device is None or device not in busy:
                    queue.pop(position)
                    if device is not None:
                        busy.add(device)
                    flight[submit(i, items[i])] = i
                    started = True
                    break
        handle, result = wait(list(flight))
        i = flight.pop(handle)
        if places[i].device is not None:
            busy.discard(places[i].device)
        yield i, result
