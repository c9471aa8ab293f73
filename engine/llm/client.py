"""The model client episodes see: an OpenAI-compatible chat endpoint with token accounting.

An episode never knows whether the endpoint is a vLLM replica dateline hosts or an external
API; it gets a :class:`ChatClient` with a base URL. Every call's prompt and completion token
counts (as reported by the server) and latency are returned with the text.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import random
import time
import zlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.budget.ledger import BudgetGate, current_gate
from engine.llm.transcripts import CallRecord

if TYPE_CHECKING:
    from engine.config.schema import JudgeConfig, ModelConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Endpoint:
    """Where a model is served: a hosted replica or an external endpoint look the same."""
    base_url: str
    model: str
    api_key_env: str = ""
    replica: int = 0
    # a hosted replica's key, generated per model pool (engine/hosting/replica.py): held in
    # memory, handed to clients with the endpoint, never printed (repr) or written
    api_key: str = field(default="", repr=False, compare=False)
    # False while its pool holds the replica out of rotation (wedged, down, restarting, not yet
    # started): no new episode goes there, and an episode pinned there moves
    in_rotation: bool = True
    # why it is out of rotation, as its pool says ("restarting: wedged (restart 2 of 3)"); shown
    # in the error of an episode that waited for it in vain
    state: str = field(default="", compare=False)


@dataclass
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    finish_reason: str = ""


@dataclass
class Usage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, c: Completion) -> None:
        self.calls += 1
        self.prompt_tokens += c.prompt_tokens
        self.completion_tokens += c.completion_tokens


class GenerationError(RuntimeError):
    """The endpoint failed after retries (the episode records it and ends)."""


class RequestRejected(GenerationError):
    """The server refused this request (HTTP 4xx, e.g. the prompt exceeds the context window).
    A property of the episode, not of the infrastructure: benchmarks may record it as a result."""


@dataclass
class SamplingParams:
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    timeout_s: float = 600.0
    max_retries: int = 2                  # per call: attempts = max_retries + 1
    backoff_s: float = 0.5                # first retry after ~backoff_s, doubling, jittered
    backoff_max_s: float = 8.0
    retry_after_max_s: float = 60.0       # a longer Retry-After is waited for this long only

    # The defaults above are ModelConfig's (tests/engine/test_config_defaults.py checks it); a run
    # builds its parameters from its config with these two, never from copied fields.
    @classmethod
    def for_model(cls, m: ModelConfig) -> SamplingParams:
        return cls(m.temperature, m.top_p, None, m.request_timeout_s, m.max_retries, m.retry_backoff_s,
                   m.retry_backoff_max_s)

    @classmethod
    def for_judge(cls, j: JudgeConfig) -> SamplingParams:
        """A judge call: the judge's temperature and timeout; one retry at the transport level (a
        malformed verdict is asked again ``judge.max_attempts`` times by the judge stage)."""
        return cls(j.temperature, 1.0, None, j.request_timeout_s, 1)


class RetryBudget:
    """Retries one episode (or one judge request) may spend over all its calls; shared by the
    calls of an :class:`EpisodeClient`. ``limit`` None: no cap beyond each call's own."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.used = 0

    def take(self) -> bool:
        if self.limit is not None and self.used >= self.limit:
            return False
        self.used += 1
        return True


RETRY_STATUS = (408, 409, 429, 500, 502, 503, 504)


def retry_after(e: BaseException) -> float | None:
    """Seconds the server asked to wait (``Retry-After``: seconds or an HTTP date;
    ``retry-after-ms``), or None."""
    headers = getattr(getattr(e, "response", None), "headers", None) or {}
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return max(0.0, float(ms) / 1000.0)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            from email.utils import parsedate_to_datetime

            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


def retryable(e: BaseException) -> bool:
    """A failure worth asking again: rate limits, server errors, connection resets and timeouts
    (the call's deadline included), a body that is not the JSON it claims to be, an answer
    without choices."""
    status = getattr(e, "status_code", None)
    if isinstance(status, int):
        return status in RETRY_STATUS
    return isinstance(e, (MalformedResponse, json.JSONDecodeError, TimeoutError)) or type(e).__name__ in (
        "APIConnectionError", "APITimeoutError", "ConnectError", "ReadError", "RemoteProtocolError", "ReadTimeout")


class MalformedResponse(RuntimeError):
    """A 200 answer without what a chat completion must carry (no choices, no message)."""


def _http_client(sampling: SamplingParams) -> Any:
    """The SDK's aiohttp transport (``openai.DefaultAioHttpClient``: its own defaults, proxies
    from the environment as httpx reads them) with its errors named as httpx names them, when
    this SDK has it; else None (the SDK's httpx transport). httpx's connection pool checks every
    pooled connection on every request: with a replica's 64 calls in flight that is most of a
    client's CPU per call, which the aiohttp transport does not spend (``perf/client_overhead.py``)."""
    client = _aiohttp_client_class()
    return client(timeout=sampling.timeout_s) if client is not None else None


@functools.cache
def _aiohttp_client_class() -> Any:
    """The client class :func:`_http_client` makes, defined once per process (None, said once,
    when this SDK has no aiohttp transport)."""
    try:
        import aiohttp
        import httpx2
        from openai import DefaultAioHttpClient
        from openai._vendor.httpx_aiohttp.transport import AiohttpTransport
    except ImportError as e:                  # an SDK without it, or aiohttp missing
        log.warning("model calls use the OpenAI SDK's httpx transport (%s): about twice the CPU per call", e)
        return None

    @contextlib.contextmanager
    def named_as_httpx(request: Any) -> Iterator[None]:
        """The SDK's map sends every aiohttp connection error to ``ConnectTimeout`` (a refused
        connection, a reset), which the SDK reports as "Request timed out.": name them as httpx
        does (``ConnectError``, ``ReadError``: the SDK's "Connection error."), keeping the cause."""
        try:
            yield
        except httpx2.TransportError as e:
            cause = e.__cause__
            if cause is None or isinstance(cause, TimeoutError):
                raise
            if isinstance(cause, aiohttp.ClientConnectorError):
                raise httpx2.ConnectError(str(cause), request=request) from cause
            if isinstance(cause, aiohttp.ServerDisconnectedError):
                raise httpx2.RemoteProtocolError(str(cause), request=request) from cause
            if isinstance(cause, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)):
                raise httpx2.ReadError(str(cause) or type(cause).__name__, request=request) from cause
            raise

    class Body(httpx2.AsyncByteStream):
        def __init__(self, inner: Any, request: Any) -> None:
            self.inner, self.request = inner, request

        async def __aiter__(self) -> Any:
            with named_as_httpx(self.request):
                async for chunk in self.inner:
                    yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    class Transport(AiohttpTransport):
        async def handle_async_request(self, request: Any) -> Any:
            with named_as_httpx(request):
                response = await super().handle_async_request(request)
            response.stream = Body(response.stream, request)
            return response

    class Client(DefaultAioHttpClient):
        def _init_transport(self, **kw: Any) -> Any:  # type: ignore[override]  # called with keywords only
            return kw.get("transport") or Transport(**{k: v for k, v in kw.items() if k != "transport"})

        def _init_proxy_transport(self, proxy: Any, **kw: Any) -> Any:  # type: ignore[override]
            return Transport(proxy=proxy, **kw)

    return Client


class ChatClient:
    """``gate`` (an :class:`engine.budget.BudgetGate`): every call reserves its worst case before
    it is sent and settles after; a refused call raises :class:`engine.budget.BudgetExhausted`
    and sends nothing. Without one, the gate of the calling context applies
    (``engine.budget.current_gate``, set by the episode runner), if any.

    ``on_call(request, completion, t_sent, t_done)``, when set, sees every answered call: the
    request body as sent and ``time.perf_counter()`` around it (perf/engine_ceiling.py
    records a run's requests with it to replay them)."""

    def __init__(self, endpoint: Endpoint, sampling: SamplingParams, max_inflight: int = 8,
                 gate: BudgetGate | None = None,
                 on_call: Callable[[dict[str, Any], Completion, float, float], None] | None = None) -> None:
        from openai import AsyncOpenAI

        key = endpoint.api_key or (os.environ.get(endpoint.api_key_env, "") if endpoint.api_key_env else "")
        self.endpoint = endpoint
        self.sampling = sampling
        # retries are ours (``chat``): jittered backoff, Retry-After honoured, capped per call and
        # per episode (RetryBudget); the SDK's own would be invisible to those caps
        self._client = AsyncOpenAI(base_url=endpoint.base_url, api_key=key or "EMPTY",
                                   timeout=sampling.timeout_s, max_retries=0, http_client=_http_client(sampling))
        self.retries = 0
        self._slots = asyncio.Semaphore(max_inflight)
        self.usage = Usage()
        self.gate = gate
        self.on_call = on_call

    async def chat(self, messages: list[dict[str, str]], max_tokens: int,
                   json_schema: dict[str, Any] | None = None, seed: int | None = None,
                   regex: str | None = None, temperature: float | None = None,
                   retry_budget: RetryBudget | None = None, endpoint_retries: bool = True) -> Completion:
        """One chat completion. ``json_schema`` / ``regex`` constrain decoding (vLLM structured
        outputs; ``regex`` is vLLM-specific and sent as ``structured_outputs``). ``temperature``
        overrides the client's sampling temperature for this call (e.g. a benchmark's own).

        A retryable failure (:func:`retryable`) is asked again after a jittered exponential
        backoff (``sampling.backoff_s`` doubling up to ``backoff_max_s``, times 0.5-1.0), or after
        the server's ``Retry-After`` (at most ``retry_after_max_s``), at most
        ``sampling.max_retries`` times per call and while ``retry_budget`` (the episode's) lasts;
        then :class:`GenerationError` names the last failure and the attempts. A 4xx about the
        request is :class:`RequestRejected` at once. ``endpoint_retries=False``: a failure of the
        endpoint itself (:func:`endpoint_down`) is raised at once, spending no retry: the router
        waits for a replica instead (:class:`EpisodeClient`)."""
        temp = self.sampling.temperature if temperature is None else temperature
        kwargs: dict[str, Any] = dict(model=self.endpoint.model, messages=messages, max_tokens=max_tokens,
                                      temperature=temp, top_p=self.sampling.top_p)
        s = seed if seed is not None else self.sampling.seed
        if s is not None:
            kwargs["seed"] = s
        if json_schema is not None:
            kwargs["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "action", "schema": json_schema}}
        if regex is not None:
            kwargs["structured_outputs"] = {"regex": regex}
        gate = self.gate or current_gate.get()
        # the budget first (it may wait for room, or refuse): a waiting call holds no slot
        ticket = await gate.reserve(messages, max_tokens) if gate is not None else None
        c: Completion | None = None
        try:
            attempt = 0
            while True:
                try:
                    async with self._slots:
                        t0 = time.perf_counter()
                        # a deadline for the whole call: the HTTP client's timeout is per read, so an
                        # endpoint dripping a byte a second would hold the call forever
                        resp = await asyncio.wait_for(self._post(kwargs), self.sampling.timeout_s)
                        latency = time.perf_counter() - t0
                    if not resp.choices or resp.choices[0].message is None:
                        raise MalformedResponse("the answer has no choices")
                    break
                except Exception as e:  # noqa: BLE001 - openai's typed errors, a bad body; classified below
                    status = getattr(e, "status_code", None)
                    what = f"{type(e).__name__}: {e}" if not isinstance(e, TimeoutError) else \
                        f"TimeoutError: no complete answer within request_timeout_s={self.sampling.timeout_s:g} s"
                    what += f" [endpoint {self.endpoint.model} at {_where(self.endpoint.base_url)}]"
                    if isinstance(status, int) and 400 <= status < 500 and status not in (401, 403, 404) \
                            and status not in RETRY_STATUS:
                        raise RequestRejected(what) from e
                    if not retryable(e) or (not endpoint_retries and endpoint_down(e)):
                        raise GenerationError(what) from e
                    if attempt >= self.sampling.max_retries:
                        raise GenerationError(f"{what} (after {attempt + 1} attempts)") from e
                    if retry_budget is not None and not retry_budget.take():
                        raise GenerationError(f"{what} (the episode's {retry_budget.limit} retries are spent)") from e
                    attempt += 1
                    self.retries += 1
                    await asyncio.sleep(self._delay(attempt, retry_after(e)))
            choice = resp.choices[0]
            usage = resp.usage
            c = Completion(text=choice.message.content or "",
                           prompt_tokens=int(usage.prompt_tokens) if usage else 0,
                           completion_tokens=int(usage.completion_tokens) if usage else 0,
                           latency_s=latency, finish_reason=choice.finish_reason or "")
            if self.on_call is not None:
                self.on_call(kwargs, c, t0, t0 + latency)
        finally:
            if gate is not None and ticket is not None:      # a failed call spent nothing the run records
                await gate.settle(ticket, c.prompt_tokens if c else 0, c.completion_tokens if c else 0)
        self.usage.add(c)
        return c

    def _post(self, body: dict[str, Any]) -> Awaitable[Any]:
        """``POST /chat/completions`` with ``body`` as it is: the SDK's typed errors, auth and
        response parsing, without ``chat.completions.create``'s walk of every message through the
        parameters' TypedDict annotations (a fifth of a judge actor's CPU in its profile at 200
        calls/s, for a body of plain strings it leaves unchanged; ``perf/client_overhead.py``)."""
        from openai.types.chat import ChatCompletion

        return self._client.post("/chat/completions", body=body, cast_to=ChatCompletion,
                                 options={"security": {"bearer_auth": True}})

    def _delay(self, attempt: int, asked: float | None) -> float:
        """Seconds before retry ``attempt`` (1-based): the server's ``Retry-After`` (capped), else
        exponential backoff; both jittered so that failed calls do not come back in step."""
        sp = self.sampling
        if asked is not None:
            return min(asked, sp.retry_after_max_s) * random.uniform(1.0, 1.1)
        return min(sp.backoff_max_s, sp.backoff_s * 2.0 ** (attempt - 1)) * random.uniform(0.5, 1.0)

    async def close(self) -> None:
        await self._client.close()


def _where(base_url: str) -> str:
    """An endpoint as an error names it: scheme, host and port (no path, query or credentials)."""
    from urllib.parse import urlsplit

    u = urlsplit(base_url)
    return f"{u.scheme}://{u.hostname}{f':{u.port}' if u.port else ''}"


def unreachable(e: BaseException) -> bool:
    """The endpoint itself failed (connection refused or reset, timeout, 502/503/504), as opposed
    to an answer about this request: another replica may serve the call."""
    cause = e.__cause__ or e
    if type(cause).__name__ in ("APIConnectionError", "APITimeoutError", "ConnectError", "ReadError",
                                "RemoteProtocolError", "ConnectionError", "TimeoutError"):
        return True
    return getattr(cause, "status_code", None) in (502, 503, 504)


def endpoint_down(e: BaseException) -> bool:
    """The endpoint as a whole failed (connection refused or reset, a 502/503/504 from what
    stands before it), not this request: nothing about the episode, so a hosted pool's episodes
    wait for a replica instead of spending retries (a timeout is not one: the request may be
    why)."""
    cause = e.__cause__ or e
    if type(cause).__name__ in ("APITimeoutError", "TimeoutError", "ReadTimeout"):
        return False
    if type(cause).__name__ in ("APIConnectionError", "ConnectError", "ReadError", "RemoteProtocolError",
                                "ConnectionError", "ConnectionRefusedError", "ConnectionResetError"):
        return True
    return getattr(cause, "status_code", None) in (502, 503, 504)


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

    # -- state -------------------------------------------------------------------------------
    def update(self, endpoints: list[Endpoint]) -> None:
        """New endpoints (same replica indices, possibly new URLs): every replica is tried again."""
        self.endpoints = list(endpoints)
        self._down.clear()

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
        rec.model, rec.replica, rec.endpoint = ep.model, ep.replica, _where(ep.base_url)

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
            try:
                return await r.client(i).chat(messages, max_tokens, json_schema, seed, regex, temperature,
                                              retry_budget=self.retries, endpoint_retries=not waits)
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
                log.warning("replica %d (%s) %s (%s); %s episode %s", i, _where(r.endpoints[i].base_url),
                            "restarted by its pool" if pool_restart else "unreachable", e,
                            "re-routing" if waits else "retrying", self.episode_id)

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
