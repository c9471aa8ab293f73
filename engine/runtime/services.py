"""Benchmark services (``engine.protocol.ServiceSpec``): built once, shared by every episode.

On a cluster a service is a Ray actor with a high ``max_concurrency`` (its methods are cheap
and synchronous; Ray runs them on the actor's threads); episodes reach it through
:class:`RemoteService`, whose methods are awaited. Tests and single-process use build the same
object in-process and wrap it in :class:`LocalService`, which has the same async surface.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from typing import Any

from engine.protocol import ServiceSpec
from engine.runtime.actors import Replicas, remember, unique_name
from engine.runtime.replicas import Balanced


def _factory(spec: ServiceSpec) -> Callable[..., Any]:
    f = spec.factory
    if isinstance(f, str):  # "module:attr", so specs stay small and importable anywhere
        mod, _, attr = f.partition(":")
        f = getattr(importlib.import_module(mod), attr)
    factory: Callable[..., Any] = f
    return factory


class LocalService:
    """Async proxy over an in-process object."""

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._obj, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(0)
            return method(*args, **kwargs)

        return call


class RemoteService:
    """Async proxy over a Ray actor handle, or over a service's
    :class:`~engine.runtime.actors.Replicas` (each call to the least loaded one):
    ``await svc.search(...)``."""

    def __init__(self, handle: Any) -> None:
        self._calls = Balanced(handle)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._calls.method(name)


def build_local(spec: ServiceSpec) -> LocalService:
    return LocalService(_factory(spec)(**spec.kwargs))


def start_actor(spec: ServiceSpec, replicas: int = 1) -> Any:
    """Start the service as a Ray actor and wait until it is built (so failures surface here);
    with ``replicas`` > 1, that many actors spread over the nodes, as :class:`Replicas`."""
    import ray

    cls = ray.remote(_factory(spec))
    # a service whose process or node dies is rebuilt by Ray from the same arguments (its state is
    # derived from them), and calls in flight are retried there: a service's calls only read
    handles = []
    for _ in range(replicas):
        name = unique_name("service")      # workers find it by name (engine.runtime.actors)
        opts: dict[str, Any] = {"num_cpus": spec.num_cpus, "max_concurrency": 64, "name": name, "max_restarts": -1,
                                "max_task_retries": -1}
        if replicas > 1:
            opts["scheduling_strategy"] = "SPREAD"
        handles.append(remember(cls.options(**opts).remote(**spec.kwargs), name))
    ray.get([h.__ray_ready__.remote() for h in handles])
    return handles[0] if replicas == 1 else Replicas(tuple(handles))
