"""Calls spread over interchangeable actors (:class:`engine.runtime.actors.Replicas`).

Each client (an episode worker) keeps its own count of calls in flight per replica and sends the
next call to the least loaded one, ties broken at random (join-the-shortest-queue from where the
client stands; with many workers the random ties keep the replicas' queues even without any shared
state). A replica that raises ``RayActorError`` is restarted by Ray (``max_restarts=-1``) and its
calls retried there (``max_task_retries=-1``): the index and services only read, so a retry is safe.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from engine.runtime.actors import Replicas, members


class Balanced:
    """``await Balanced(replicas).call("search", ...)``: one actor call on the least loaded replica."""

    def __init__(self, target: Any, rng: random.Random | None = None) -> None:
        self.members = list(target.members) if isinstance(target, Replicas) else [target]
        self.inflight = [0] * len(self.members)
        self.sent = [0] * len(self.members)
        self._rng = rng or random.Random()

    def pick(self) -> int:
        low = min(self.inflight)
        best = [i for i, n in enumerate(self.inflight) if n == low]
        return best[0] if len(best) == 1 else self._rng.choice(best)

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        i = self.pick()
        self.inflight[i] += 1
        self.sent[i] += 1
        try:
            return await getattr(self.members[i], method).remote(*args, **kwargs)
        finally:
            self.inflight[i] -= 1

    def method(self, name: str) -> Callable[..., Any]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self.call(name, *args, **kwargs)

        return call


def gather_stats(target: Any, method: str = "get_stats") -> dict[str, Any]:
    """The stats of every replica (``ray.get`` of ``method``), summed key by key (``max_*`` keys
    by their maximum), with ``replicas`` and the per-replica dicts under ``per_replica``."""
    per = _ask_all(target, method)
    total: dict[str, Any] = {}
    for st in per:
        for k, v in st.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                total[k] = max(total.get(k, v), v) if k.startswith("max_") else total.get(k, 0) + v
    total["replicas"] = len(per)
    if len(per) > 1:
        total["per_replica"] = per
    return total


def ready_info(target: Any, method: str = "ready") -> dict[str, Any]:
    """What the first replica's ``method`` says (waited for), with ``replicas`` and, when there
    are several, every replica's answer under ``per_replica`` (each waited for too)."""
    per = _ask_all(target, method)
    out = dict(per[0])
    out["replicas"] = len(per)
    if len(per) > 1:
        out["per_replica"] = per
    return out


def _ask_all(target: Any, method: str) -> list[Any]:
    """``method``'s answer from every replica, asked at once."""
    import ray

    return list(ray.get([getattr(m, method).remote() for m in members(target)]))
