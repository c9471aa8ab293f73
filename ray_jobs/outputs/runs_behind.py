"""What a run dir says about the runs behind its numbers, for every output that names them: the
newest provenance of a configuration and which tasks its newest run took (``run-*.json``, written
by ray_jobs/run/sweep.py). Plain reads of the store, importing nothing of the outputs.

:class:`RunsBehind` reads each kind of file once per run dir: an output that names every
configuration of a sweep (the export, the report's provenance, the inspect logs) asks it once per
configuration, and ``store.run_infos`` lists and reads every file on each call (on S3, a GET each)."""

from __future__ import annotations

import functools
from typing import Any


class RunsBehind:
    def __init__(self, store: Any) -> None:
        self.store = store

    @functools.cached_property
    def runs(self) -> list[dict[str, Any]]:
        """The run dir's ``run-*.json``, oldest first."""
        return [i for i in self.store.run_infos("run-") if isinstance(i, dict)]

    @functools.cached_property
    def provenances(self) -> list[dict[str, Any]]:
        """The run dir's ``provenance-*.json``, oldest first."""
        return [p for p in self.store.run_infos("provenance-") if isinstance(p, dict)]

    def config_hashes(self) -> list[str]:
        """The configurations the run dir's runs recorded, in the order they first ran."""
        return list(dict.fromkeys(i["config_hash"] for i in self.runs if i.get("config_hash")))

    def tasks(self, config_hash: str) -> dict[str, Any] | None:
        """Which tasks the newest run of this configuration took (its run-*.json ``tasks``: limit,
        order, order seed); None for a run from before dateline recorded it."""
        mine = [i for i in self.runs if i.get("config_hash") == config_hash and i.get("tasks")]
        return mine[-1]["tasks"] if mine else None

    def provenance(self, config_hash: str) -> dict[str, Any]:
        """The newest provenance of the run dir that ran this configuration (else the newest)."""
        mine = [p for p in self.provenances if any(c.get("config_hash") == config_hash for c in p.get("configs") or [])]
        return (mine or self.provenances or [{}])[-1]


def tasks_text(t: dict[str, Any] | None) -> str:
    """``limit 4, random order (seed 3)`` / ``all tasks, data order``; ``not recorded``."""
    if not t:
        return "not recorded"
    limit = "all tasks" if t.get("limit") is None else f"limit {t['limit']}"
    order = f"random order (seed {t['order_seed']})" if t.get("order") == "random" else f"{t.get('order')} order"
    return f"{limit}, {order}"


def run_provenance(store: Any, config_hash: str) -> dict[str, Any]:
    """The newest provenance of the run dir that ran this configuration (else the newest): one
    question; for many, a :class:`RunsBehind`."""
    return RunsBehind(store).provenance(config_hash)
