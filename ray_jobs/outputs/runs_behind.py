"""What a run dir says about the runs behind its numbers, for every output that names them: the
newest provenance of a configuration and which tasks its newest run took (``run-*.json``, written
by ray_jobs/run/sweep.py). Plain reads of the store, importing nothing of the outputs."""

from __future__ import annotations

from typing import Any


def tasks_of(store: Any, config_hash: str) -> dict[str, Any] | None:
    """Which tasks the newest run of this configuration took (its run-*.json ``tasks``: limit,
    order, order seed); None for a run from before dateline recorded it."""
    mine = [i for i in store.run_infos("run-") if i.get("config_hash") == config_hash and i.get("tasks")]
    return mine[-1]["tasks"] if mine else None


def tasks_text(t: dict[str, Any] | None) -> str:
    """``limit 4, random order (seed 3)`` / ``all tasks, data order``; ``not recorded``."""
    if not t:
        return "not recorded"
    limit = "all tasks" if t.get("limit") is None else f"limit {t['limit']}"
    order = f"random order (seed {t['order_seed']})" if t.get("order") == "random" else f"{t.get('order')} order"
    return f"{limit}, {order}"


def run_provenance(store: Any, config_hash: str) -> dict[str, Any]:
    """The newest provenance of the run dir that ran this configuration (else the newest)."""
    infos = [p for p in store.run_infos("provenance-") if isinstance(p, dict)]
    mine = [p for p in infos if any(c.get("config_hash") == config_hash for c in p.get("configs") or [])]
    return (mine or infos or [{}])[-1]
