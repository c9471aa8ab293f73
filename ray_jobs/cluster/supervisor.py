"""The control plane beside the dispatch loop (issue 33): each model pool's health checks run on a
thread of their own, at the pool's ``model.health_check_s``, and changed endpoints are pushed to
the workers without waiting for them. A check waits for ``/health`` answers (up to 25 s for a lost
replica): in the loop, that was dispatch standing still. Nothing here raises into the loop: a
failed check or push is logged and tried again at the next round; a pool with no replica left is
reported (:attr:`Supervisor.failing`) and the loop stops its model.

**Moves** (:meth:`Supervisor.move`): the loop hands over a pool whose queue has drained; here it
is released (its GPUs back to Ray) and :class:`ray_jobs.cluster.allocation.Reallocator` gives them to the
pools with the most work left (``ModelPool.grow``), mid-wave; what moved is in :attr:`moves`."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class Supervisor:
    def __init__(self, pools: dict[str, Any], period_s: dict[str, float],
                 push: Callable[[str, list[Any]], None], record: Callable[[Any], Any]) -> None:
        self.pools = {g: p for g, p in pools.items() if p is not None}
        self.period_s = period_s
        self.push, self.record = push, record
        self.failing: dict[str, str] = {}        # model group -> why no replica serves
        self.errors = 0
        self.checks = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()            # a pool is checked by one thread at a time
        self._thread = threading.Thread(target=self._run, name="supervisor", daemon=True)
        self._moves: list[tuple[str, Callable[[], dict[str, Any]], Callable[[], dict[str, Any] | None]]] = []
        self._growing: list[tuple[dict[str, Any], Callable[[], dict[str, Any] | None]]] = []
        self.moves: list[dict[str, Any]] = []

    def move(self, g: str, release: Callable[[], dict[str, Any]], grow: Callable[[], dict[str, Any] | None]) -> None:
        """Release drained pool ``g`` (``release``, run on this thread), then hand its GPUs on
        (``grow``, asked each round until it decides: None while the pools with work left have
        not measured their pace yet); the pool is checked no more."""
        self.pools.pop(g, None)          # no lock: a check in progress must not hold up dispatch
        self._moves.append((g, release, grow))

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)

    def _run(self) -> None:
        last = {g: time.monotonic() for g in self.pools}
        while not self._stop.wait(0.1):
            while self._moves:
                g, release, grow = self._moves.pop(0)
                with self._lock:
                    try:
                        record = {"released": g, **release()}
                        self.moves.append(record)
                        self._growing.append((record, grow))
                    except Exception as e:  # noqa: BLE001 - the run goes on with the pools it has
                        self.errors += 1
                        log.warning("releasing drained pool %s failed: %s", g[:6], e)
            for record, grow in list(self._growing):
                with self._lock:
                    try:
                        done = grow()
                    except Exception as e:  # noqa: BLE001 - the run goes on with the pools it has
                        self.errors += 1
                        log.warning("handing on the GPUs of %s failed: %s", record["released"][:6], e)
                        done = {"grown": {}, "error": str(e)[:300]}
                if done is not None:
                    record.update(done)
                    self._growing.remove((record, grow))
            for g, pool in list(self.pools.items()):
                if g in self.failing or time.monotonic() - last[g] < self.period_s.get(g, 5.0):
                    continue
                with self._lock:
                    try:
                        # a replica moved or left rotation: workers route by the new endpoints,
                        # pushed before any restart is sent (a call the restart cuts off is the pool's)
                        pool.check(push=functools.partial(self.push, g))
                        self.record(pool)
                        self.checks += 1
                    except Exception as e:  # noqa: BLE001 - the next round tries again; dispatch goes on
                        self.errors += 1
                        log.warning("health check of %s failed (tried again in %.0f s): %s", g[:6],
                                    self.period_s.get(g, 5.0), e)
                last[g] = time.monotonic()
                if pool.failing:
                    self.failing[g] = pool.failing
