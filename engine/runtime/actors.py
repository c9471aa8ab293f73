"""Actors that other actors find by name.

Ray warns (an ERROR line on every run, ray-project/ray#53727) when a restartable actor is created
with a handle to another non-detached actor among its constructor arguments: a handle travels as
an inlined object reference, which a restart may find gone. The run's index, services and budget
actor are therefore named (a run-unique name in the job's namespace) and the episode workers get
:class:`ActorByName` values instead of handles, resolved with ``ray.get_actor`` where they are
used, so a restarted worker finds the actors again (they are restartable themselves and keep their
names across restarts).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

_NAMES: dict[Any, tuple[str, str]] = {}      # handle (hashes by actor id) -> (name, namespace)


def unique_name(kind: str) -> str:
    return f"dateline-{kind}-{uuid.uuid4().hex[:12]}"


def named_options(kind: str) -> dict[str, Any]:
    """``.options(**named_options("index"))``: a run-unique name in the current namespace."""
    return {"name": unique_name(kind)}


def remember(handle: Any, name: str) -> Any:
    """Record that ``handle`` is the actor called ``name`` (in the driver's namespace)."""
    import ray

    _NAMES[handle] = (name, ray.get_runtime_context().namespace)
    return handle


@dataclass(frozen=True)
class ActorByName:
    """A named actor, passed by name (a plain value) rather than by handle."""

    name: str
    namespace: str

    def resolve(self) -> Any:
        import ray

        try:
            return ray.get_actor(self.name, namespace=self.namespace)
        except ValueError as e:      # raised when no such actor is alive (or ever was)
            raise RuntimeError(f"actor {self.name!r} (namespace {self.namespace!r}) is gone: {e}") from e


@dataclass(frozen=True)
class Replicas:
    """Interchangeable actors serving the same calls (the index's replicas, a service's): a plain
    value holding their handles or :class:`ActorByName` values; clients spread calls over them
    (:class:`engine.runtime.replicas.Balanced`)."""

    members: tuple[Any, ...]

    def __post_init__(self) -> None:
        if not self.members:
            raise ValueError("Replicas needs at least one member")

    def map(self, fn: Any) -> Replicas:
        return Replicas(tuple(fn(m) for m in self.members))


def by_name(obj: Any) -> Any:
    """``obj`` as an :class:`ActorByName` when it is a handle of an actor named with
    :func:`remember` (each member of :class:`Replicas`); anything else (None, a test double, an
    unnamed handle) unchanged."""
    if isinstance(obj, Replicas):
        return obj.map(by_name)
    try:
        key = _NAMES.get(obj)
    except TypeError:             # unhashable test doubles
        return obj
    return ActorByName(*key) if key is not None else obj


def resolve(obj: Any) -> Any:
    if isinstance(obj, Replicas):
        return obj.map(resolve)
    return obj.resolve() if isinstance(obj, ActorByName) else obj


def members(obj: Any) -> list[Any]:
    """The actors behind a handle (itself) or a :class:`Replicas` (its members)."""
    return list(obj.members) if isinstance(obj, Replicas) else [obj]
