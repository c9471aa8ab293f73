"""The episodes one dispatch has still to start: a queue per model group, the episodes an adaptive
rule holds aside (a paused point's), and how many times each episode went to a worker. It decides
the order episodes go out in: a group's points in turn (:func:`interleave`), a requeued episode
first, a resumed point's held episodes before the rest. It is the scheduler of
``dispatch_loop.py``, kept apart from the workers as inspect_ai keeps its ``SampleScheduler``: pure
Python, no Ray, so its order can be tested alone (``tests/ray_jobs/test_queues.py``)."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import replace

from engine.runtime.dispatch import EpisodeSpec


def interleave(lists: list[list[EpisodeSpec]]) -> list[EpisodeSpec]:
    """One queue from the points' episodes, taken in turn (a1 b1 c1 a2 b2 ...): every point moves
    at the same pace, so no point's episodes all wait at the end of the queue. Point after point,
    the last point (in a budget sweep the costliest: Hydra lists 1,3,5,7) would start only when the
    others were done and run its whole length as the sweep's tail; and under a GPU-hour or dollar
    cap, whose ledger is charged the pool's uptime while its point runs (docs/design/budget.md),
    it would pay for its wait at the end of the queue before its first episode started."""
    out: list[EpisodeSpec] = []
    for i in range(max((len(x) for x in lists), default=0)):
        out += [x[i] for x in lists if i < len(x)]
    return out


class EpisodeQueues:
    """Per model group ``g`` its queue of episodes; per point (its key) the episodes held aside;
    per episode id the times it was dispatched. Each episode carries its point's key
    (``EpisodeSpec.point``)."""

    def __init__(self) -> None:
        self.queues: dict[str, deque[EpisodeSpec]] = {}
        self.held: dict[str, list[EpisodeSpec]] = defaultdict(list)    # per point: paused, off the queue
        self.attempts: dict[str, int] = defaultdict(int)               # per episode id: times dispatched

    def add(self, g: str, points: list[tuple[str, list[EpisodeSpec]]]) -> None:
        """The queue of group ``g``: the episodes of its points (key, episodes), taken in turn."""
        self.queues[g] = deque(interleave([[replace(s, point=key) for s in todo] for key, todo in points]))

    def __contains__(self, g: str) -> bool:
        return g in self.queues

    def queued(self, g: str) -> int:
        """How many episodes wait in group ``g``'s queue (held ones not counted)."""
        return len(self.queues[g])

    def total(self, but: str | None = None) -> int:
        """The episodes queued in every group (but group ``but``)."""
        return sum(len(q) for g, q in self.queues.items() if g != but)

    def waiting(self) -> set[str]:
        """The groups with episodes queued."""
        return {g for g, q in self.queues.items() if q}

    def has(self, g: str, key: str) -> bool:
        """Whether point ``key`` has episodes queued in group ``g``."""
        return any(s.point == key for s in self.queues[g])

    def waiting_for(self, keys: set[str], groups: Iterable[str]) -> bool:
        """Whether any of the points ``keys`` (queued in ``groups``) has episodes queued or held."""
        return any(s.point in keys for g in groups for s in self.queues[g]) or bool(keys & set(self.held))

    def next(self, g: str, wants: Callable[[str], bool]) -> EpisodeSpec | None:
        """The next episode of group ``g`` to dispatch: one whose point ``wants`` (the adaptive
        rule's answer, by point key) says no is held aside, and the one after it is tried."""
        q = self.queues[g]
        while q:
            spec = q.popleft()
            if wants(spec.point):
                return spec
            self.hold(spec)
        return None

    def dispatched(self, spec: EpisodeSpec) -> None:
        """``spec`` went to a worker: one more attempt."""
        self.attempts[spec.episode_id] += 1

    def attempts_of(self, episode_id: str) -> int:
        return self.attempts[episode_id]

    def requeue_front(self, g: str, spec: EpisodeSpec) -> None:
        """An episode back at the front of its queue (its worker was lost, or its ledger was)."""
        self.queues[g].appendleft(spec)

    def hold(self, spec: EpisodeSpec) -> None:
        """An episode of a paused point, aside until the point resumes or stops."""
        self.held[spec.point].append(spec)

    def holds(self, key: str) -> bool:
        """Whether point ``key`` has episodes held aside."""
        return bool(self.held.get(key))

    def held_points(self) -> list[str]:
        """The points with episodes held aside, in the order they were first held."""
        return list(self.held)

    def resume(self, g: str, key: str) -> int:
        """Point ``key``'s held episodes back at the front of group ``g``'s queue, in their order;
        how many."""
        specs = self.held.pop(key, [])
        if specs:
            self.queues[g].extendleft(reversed(specs))
        return len(specs)

    def take_point(self, g: str, key: str, held_first: bool = False) -> list[EpisodeSpec]:
        """Every episode of point ``key`` off group ``g``'s queue and out of the held ones, none to
        be dispatched again: the queued ones in queue order, its held ones after them (before them
        when ``held_first``: a stopped point's held episodes were next in line)."""
        held = self.held.pop(key, [])
        if held_first:
            self.queues[g].extendleft(reversed(held))
        else:
            self.queues[g].extend(held)
        q = self.queues[g]
        gone = [s for s in q if s.point == key]
        self.queues[g] = deque(s for s in q if s.point != key)
        return gone
