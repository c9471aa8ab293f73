"""What happened to a run's model replicas, stored in its run dir.

A pool (:class:`engine.hosting.replica.ModelPool`) records an event for each start, each verdict
that is not ``ok`` (with the metrics behind it: requests in the engine, tokens/s, the measured
prompt rate, the stall window and how long the stall lasted), each restart and its cause, each
replica given up and a model declared failing. The driver stores them as they come in
``replica-events-<run start>-<random>.json`` of every run dir whose episodes use the pool (rewritten whole
each time: a run that is stopped keeps what happened up to then). ``dateline show``, the run's
summary and the report read them back with :func:`read_events` and group them by cause
(:func:`causes`): ``replica restarted: wedged x11``, not the connection errors the restarts
caused.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

PREFIX = "replica-events-"


class _Store(Protocol):
    def write_json(self, name: str, obj: Any) -> None: ...

    def run_infos(self, prefix: str = "run-") -> list[Any]: ...


class _Pool(Protocol):
    def drain_events(self) -> list[dict[str, Any]]: ...


class ReplicaEvents:
    """The events of one driver run, per model group (``stores``: the run dirs of each group's
    points; ``pools``: each group's pool, None for episodes without a model)."""

    def __init__(self, stores: Mapping[str, Sequence[_Store]], pools: Mapping[str, _Pool | None]) -> None:
        # one file per dispatch (a sweep's waves each have one): never two writers of one name
        self.name = f"{PREFIX}{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}.json"
        self.stores = stores
        self.pools = pools
        self.by_store: dict[int, tuple[_Store, list[dict[str, Any]]]] = {}

    def record(self, pool: _Pool) -> list[dict[str, Any]]:
        """Store the pool's new events in the run dirs of the groups it serves; returns them."""
        new = pool.drain_events()
        if not new:
            return new
        for g, p in self.pools.items():
            if p is not pool:
                continue
            for store in self.stores.get(g, ()):
                _, events = self.by_store.setdefault(id(store), (store, []))
                events.extend(new)
        for store, events in self.by_store.values():
            store.write_json(self.name, events)
        return new

    def record_all(self) -> None:
        for pool in {id(p): p for p in self.pools.values() if p is not None}.values():
            self.record(pool)


def read_events(store: _Store) -> list[dict[str, Any]]:
    """Every replica event stored in a run dir, oldest first."""
    out: list[dict[str, Any]] = []
    for events in store.run_infos(prefix=PREFIX):
        if isinstance(events, list):
            out.extend(e for e in events if isinstance(e, dict))
    return sorted(out, key=lambda e: float(e.get("t") or 0.0))


def causes(events: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Restarts and failures grouped by cause, e.g. ``{"qwen: replica restarted: wedged": 11,
    "qwen: model failing": 1}``."""
    c: Counter[str] = Counter()
    for e in events:
        m = e.get("model", "?")
        if e.get("event") == "restart":
            c[f"{m}: replica restarted: {e.get('cause', '?')}"] += 1
        elif e.get("event") == "start_failed":
            c[f"{m}: replica failed to start"] += 1
        elif e.get("event") == "given_up":
            c[f"{m}: replica given up"] += 1
        elif e.get("event") == "model_failing":
            c[f"{m}: model failing"] += 1
    return dict(c)


def describe(events: Sequence[dict[str, Any]]) -> list[str]:
    """Lines for a summary: each cause with its count, then each diagnosis once."""
    lines = [f"{k} x{n}" for k, n in causes(events).items()]
    seen = set()
    for e in events:
        why = e.get("reason") if e.get("event") in ("given_up", "model_failing") else None
        if why and why not in seen and not any(why in str(o.get("reason", "")) for o in events
                                               if o is not e and o.get("event") == "model_failing"):
            seen.add(why)
            lines.append(f"  {why}")
    return lines
