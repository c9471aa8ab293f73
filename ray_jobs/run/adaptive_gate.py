"""The adaptive rule as one dispatch sees it (``ray_jobs/run/adaptive.py``): whether a point's next
episode may go out (a paused point's may not), what was dispatched and what came back, and, at most
once a second, the rule's new decisions: the points it stops and those it resumes. The loop acts on
them (``dispatch_loop.py``); without a rule every episode goes out and nothing is decided."""

from __future__ import annotations

import time
from collections.abc import Container, Iterable
from typing import Any

from engine.runtime.dispatch import EpisodeSpec
from ray_jobs.run.adaptive import Racer
from ray_jobs.run.planning import Point


class AdaptiveGate:
    """The sweep's race (``racer``; None: no adaptive rule) and when it last decided."""

    def __init__(self, racer: Racer | None) -> None:
        self.racer = racer
        self.last_adapt = 0.0

    @classmethod
    def of(cls, points: Iterable[Point]) -> AdaptiveGate:
        """The gate of the race these points share (every raced point carries it: ``Point.racer``)."""
        return cls(next((p.racer for p in points if p.racer is not None), None))

    @property
    def on(self) -> bool:
        return self.racer is not None

    def races(self, key: str) -> bool:
        """Whether point ``key`` is in the race."""
        return self.racer is not None and key in self.racer.points

    def wants(self, key: str) -> bool:
        """Whether point ``key``'s next episode may be dispatched (no: the race paused it)."""
        return self.racer is None or self.racer.race.wants(key) or key not in self.racer.points

    def dispatched(self, spec: EpisodeSpec) -> None:
        if self.racer is not None:
            self.racer.dispatched(spec.point, spec.task_id)

    def take(self, key: str, row: dict[str, Any]) -> bool:
        """A stored episode of point ``key`` fed to the race; whether the point is raced."""
        if self.racer is not None and key in self.racer.points:
            self.racer.take(key, row)
            return True
        return False

    def stopped_before(self, keys: Container[str]) -> list[tuple[str, str]]:
        """The points of ``keys`` a resumed run finds stopped, with why (the logged decision)."""
        if self.racer is None:
            return []
        race = self.racer.race
        return [(k, next(d.reason for d in race.decisions if d.config == k)) for k in race.stopped if k in keys]

    def step(self, force: bool = False) -> tuple[list[tuple[str, str]], list[str]] | None:
        """The rule's new decisions on what is stored so far: the points it stops (key, why) and
        those it resumes; None when there is no rule, or it decided less than a second ago (unless
        ``force``)."""
        if self.racer is None or (not force and time.monotonic() - self.last_adapt < 1.0):
            return None
        self.last_adapt = time.monotonic()
        new, _paused, resumed = self.racer.step()
        return [(d.config, d.reason) for d in new], resumed
