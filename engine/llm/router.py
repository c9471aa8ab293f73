"""Replicas behind one model, as episodes see them: :class:`Router` (load-aware sticky routing
over a model's replicas, bounded in-flight requests per replica, re-routing when a replica leaves
rotation) and :class:`EpisodeClient` (an episode's calls, pinned to its replica, recorded as call
rows). The HTTP client of one endpoint is :class:`~engine.llm.client.ChatClient`."""

from __future__ import annotations

import asyncio
import logging
import random
import time
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.llm.client import ChatClient
from engine.llm.retry import endpoint_down, unreachable, where
from engine.llm.transcripts import CallRecord
from engine.llm.types import Completion, Endpoint, GenerationError, RequestRejected, RetryBudget, SamplingParams

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)


class ReplicaUnavailable(GenerationError):
    """No replica of the model served within ``model.replica_wait_s`` (its pool restarting them,
    or none started): the pool's failure, named with its cause; the episode spent no retry on it."""


class Router:
    """Load-aware sticky routing over a model's replicas.

    A new episode goes to the healthy replica with the fewest active episodes (ties spread by a
    hash of the episode id) and stays there while it is healthy, so every turn reuses that
    replica's prefix cache. A call that finds its replica unreachable marks it unhealthy and is
    re-routed to the least-loaded live replica (the episode sticks to the new one); when none is
    live, the call waits for one to answer ``/health`` again (a restarted server) for up to
    ``reroute_wait_s``. An unhealthy replica is probed again after ``recheck_s``. The driver
    pushes new endpoint lists (a replica re-created elsewhere, one taken out of or back into
    rotation by its pool's health checks) with :meth:`update`.

    Re-pinning: an episode whose replica holds more active episodes than its in-flight bound (so
    they queue for it), more than ``repin_ratio`` times those of the least-loaded live replica and
    at least ``repin_min_gap`` more, moves there at its next call (one prefix re-computed, instead of a replica that came back from a restart, or was added
    late, sitting idle while another one queues)."""

    def __init__(self, endpoints: list[Endpoint], sampling: SamplingParams, max_inflight_per_replica: int = 8,
                 reroute_wait_s: float = 0.0, recheck_s: float = 5.0, max_retries_per_episode: int | None = None,
                 repin_ratio: float = 2.0, repin_min_gap: int = 4) -> None:
        self.max_retries_per_episode = max_retries_per_episode     # each EpisodeClient's RetryBudget
        self.on_call: Callable[[dict[str, Any], Completion, float, float], None] | None = None   # see ChatClient
        self.endpoints = list(endpoints)
        self.sampling = sampling
        self.max_inflight_per_replica = max_inflight_per_replica
        self.reroute_wait_s = reroute_wait_s
        self.recheck_s = recheck_s
        self._clients: dict[str, ChatClient] = {}          # by base_url
        self._down: dict[int, float] = {}                   # replica index -> when marked unhealthy
        self._sticky: dict[str, int] = {}                   # episode id -> replica index
        self.reroutes = 0
        self.repin_ratio = repin_ratio
        self.repin_min_gap = repin_min_gap
        self.repins = 0
        # calls in flight per replica, and those cancelled because their replica left rotation
        self._inflight: dict[int, set[asyncio.Task[Completion]]] = {}
        self._evicted: set[asyncio.Task[Completion]] = set()
        self.evictions = 0

    # -- state -------------------------------------------------------------------------------
    def update(self, endpoints: list[Endpoint]) -> None:
        """New endpoints (same replica indices, possibly new URLs): every replica is tried again.
        Calls in flight on a replica that left rotation (its pool found it wedged or down: a
        black-holed node never answers) or moved are cancelled and re-routed at once, spending no
        retry of their episodes, instead of waiting out ``request_timeout_s`` there."""
        old = self.endpoints
        self.endpoints = list(endpoints)
        self._down.clear()
        for i, ep in enumerate(old):
            new = self.endpoints[i] if i < len(self.endpoints) else None
            if ep.in_rotation and (new is None or not new.in_rotation or new.base_url != ep.base_url):
                for task in list(self._inflight.get(i, ())):
                    if not task.done():
                        self._evicted.add(task)
                        self.evictions += 1
                        task.cancel("its replica left rotation")

    def healthy(self, i: int) -> bool:
        ep = self.endpoints[i]
        if not (ep.in_rotation and ep.base_url):
            return False
        t = self._down.get(i)
        return t is None or time.monotonic() - t >= self.recheck_s

    def mark_down(self, i: int) -> None:
        self._down[i] = time.monotonic()

    def load(self) -> list[int]:
        """Active (sticky) episodes per replica."""
        n = [0] * len(self.endpoints)
        for i in self._sticky.values():
            n[i] += 1
        return n

    def pick(self, episode_id: str) -> int:
        n = len(self.endpoints)
        i = self._sticky.get(episode_id)
        sticky = i is not None and i < n and self.healthy(i)
        live = [j for j in range(n) if self.healthy(j)]
        load, h = self.load(), zlib.crc32(episode_id.encode())
        if sticky:
            assert i is not None
            least = min(live, key=lambda j: load[j])
            if not (load[i] > self.max_inflight_per_replica and load[i] > self.repin_ratio * (load[least] + 1)
                    and load[i] - load[least] >= self.repin_min_gap):
                return i
            self.repins += 1
            log.info("re-pinning episode %s from replica %d (%d active) to %d (%d active)", episode_id, i, load[i],
                     least, load[least])
        # none live: any with an address (a call there fails over, or waits for a restart)
        live = live or [j for j in range(n) if self.endpoints[j].base_url] or list(range(n))
        j = min(live, key=lambda j: (load[j], (h + j) % n))
        self._sticky[episode_id] = j
        return j

    def release(self, episode_id: str) -> None:
        """The episode is over: it no longer counts toward its replica's load."""
        self._sticky.pop(episode_id, None)

    def client(self, i: int) -> ChatClient:
        ep = self.endpoints[i]
        if ep.base_url not in self._clients:
            self._clients[ep.base_url] = ChatClient(ep, self.sampling, self.max_inflight_per_replica,
                                                    on_call=self.on_call)
        return self._clients[ep.base_url]

    def client_for(self, episode_id: str, seed: int | None = None) -> EpisodeClient:
        """The client of one episode; ``seed`` (the episode's) is sent with every call that sets none."""
        return EpisodeClient(self, episode_id, seed)

    async def wait_for_health(self, deadline: float) -> None:
        """Until some replica answers ``/health`` (or the deadline): a restarted server. Probed
        every ``recheck_s`` (it was a fixed 5 s, whatever ``recheck_s`` said)."""
        import httpx

        async with httpx.AsyncClient(timeout=5.0) as http:
            while time.monotonic() < deadline:
                for i, ep in enumerate(self.endpoints):
                    if not (ep.in_rotation and ep.base_url):
                        continue
                    root = ep.base_url[:-3] if ep.base_url.endswith("/v1") else ep.base_url
                    try:
                        if (await http.get(root + "/health")).status_code == 200:
                            self._down.pop(i, None)
                            return
                    except httpx.HTTPError:
                        pass
                await asyncio.sleep(min(self.recheck_s, max(0.0, deadline - time.monotonic())))

    async def close(self) -> None:
        for c in self._clients.values():
            await c.close()


class EpisodeClient:
    """What an episode holds as ``ctx.llm``: the router's client for its sticky replica, with
    failover. Same ``chat`` as :class:`ChatClient`."""

    def __init__(self, router: Router, episode_id: str, seed: int | None = None) -> None:
        self.router = router
        self.episode_id = episode_id
        self.seed = seed
        self.retries = RetryBudget(router.max_retries_per_episode)      # over all the episode's calls
        # every call, answered or not, as the transcript stores it (engine/llm/transcripts.py)
        self.calls: list[CallRecord] = []

    @property
    def endpoint(self) -> Endpoint:
        return self.router.endpoints[self.router.pick(self.episode_id)]

    async def chat(self, messages: list[dict[str, str]], max_tokens: int,
                   json_schema: dict[str, Any] | None = None, seed: int | None = None,
                   regex: str | None = None, temperature: float | None = None) -> Completion:
        seed = self.seed if seed is None else seed
        sp = self.router.sampling
        rec = CallRecord(messages=[dict(m) for m in messages], started_at=time.time(), params={
            "max_tokens": max_tokens, "temperature": sp.temperature if temperature is None else temperature,
            "top_p": sp.top_p, "seed": seed, **({"json_schema": True} if json_schema is not None else {}),
            **({"regex": regex} if regex is not None else {})})
        self.calls.append(rec)
        try:
            c = await self._chat(messages, max_tokens, json_schema, seed, regex, temperature)
        except BaseException as e:
            rec.error = f"{type(e).__name__}: {e}"[:2000]
            self._where(rec)
            raise
        rec.completion, rec.finish_reason = c.text, c.finish_reason
        rec.tokens_in, rec.tokens_out, rec.latency_s = c.prompt_tokens, c.completion_tokens, c.latency_s
        self._where(rec)
        return c

    def _where(self, rec: CallRecord) -> None:
        ep = self.endpoint
        rec.model, rec.replica, rec.endpoint = ep.model, ep.replica, where(ep.base_url)

    async def _chat(self, messages: list[dict[str, str]], max_tokens: int, json_schema: dict[str, Any] | None,
                    seed: int | None, regex: str | None, temperature: float | None) -> Completion:
        """A call on the episode's replica. Where the router may wait for replicas
        (``reroute_wait_s`` > 0: a hosted pool), a failure of the replica itself (refused, reset:
        a restart its pool decided on, a crash) spends none of the episode's retries: the call
        moves to another live replica, or waits for one to come back into rotation, for up to
        ``reroute_wait_s`` in all (:class:`ReplicaUnavailable` after that, naming why none
        served). Elsewhere (an external endpoint) such failures are retried like any other."""
        r = self.router
        waits = r.reroute_wait_s > 0
        deadline: float | None = None            # from the call's first failure of a replica
        failed = 0                               # replica failures of this call so far
        while True:
            if failed and waits:                 # never a tight loop on a replica that answers /health, not calls
                sp = r.sampling
                await asyncio.sleep(min(sp.backoff_max_s, sp.backoff_s * 2.0 ** (failed - 1)) * random.uniform(0.5, 1.0))
            i = r.pick(self.episode_id)
            call = asyncio.ensure_future(r.client(i).chat(messages, max_tokens, json_schema, seed, regex, temperature,
                                                          retry_budget=self.retries, endpoint_retries=not waits))
            r._inflight.setdefault(i, set()).add(call)
            try:
                return await call
            except asyncio.CancelledError:
                me = asyncio.current_task()
                if call not in r._evicted or (me is not None and me.cancelling()):
                    raise                        # the episode itself is cancelled
                failed += 1                      # its replica left rotation: elsewhere, no retry spent
                r.reroutes += 1
                log.warning("replica %d (%s) left rotation with a call in flight; re-routing episode %s", i,
                            where(r.endpoints[i].base_url), self.episode_id)
                continue
            except RequestRejected:
                raise
            except GenerationError as e:
                if not (unreachable(e) or endpoint_down(e)):
                    raise
                pool_restart = not r.endpoints[i].in_rotation      # its pool took it out first
                failed += 1
                r.mark_down(i)
                now = time.monotonic()
                if deadline is None:
                    deadline = now + r.reroute_wait_s
                if not any(r.healthy(j) for j in range(len(r.endpoints))):
                    if now >= deadline:
                        raise self._unavailable(e) if waits else e    # noqa: B904 (e, or an error naming it)
                    await r.wait_for_health(deadline)        # a restarted server, or the deadline
                    if not any(r.healthy(j) for j in range(len(r.endpoints))):
                        raise self._unavailable(e) if waits else e    # noqa: B904 (e, or an error naming it)
                r.reroutes += 1
                log.warning("replica %d (%s) %s (%s); %s episode %s", i, where(r.endpoints[i].base_url),
                            "restarted by its pool" if pool_restart else "unreachable", e,
                            "re-routing" if waits else "retrying", self.episode_id)
            finally:
                r._inflight.get(i, set()).discard(call)
                r._evicted.discard(call)

    def _unavailable(self, e: BaseException) -> ReplicaUnavailable:
        """Why no replica served, in the words of their pool (each endpoint's ``state``)."""
        r = self.router
        states = sorted({ep.state or ("in rotation, unreachable" if ep.in_rotation else "out of rotation")
                         for ep in r.endpoints})
        model = r.endpoints[0].model if r.endpoints else "?"
        return ReplicaUnavailable(f"replica {'; '.join(states)} | no replica of {model} served for "
                                  f"{r.reroute_wait_s:g} s (model.replica_wait_s); last failure: {e}")

    def close(self) -> None:
        self.router.release(self.episode_id)
