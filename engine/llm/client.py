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
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.budget.gate import BudgetGate, current_gate

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
    connect_timeout_s: float = 10.0       # opening a connection: short, so a gone node fails fast

    # The defaults above are ModelConfig's (tests/engine/config/test_config_defaults.py checks it); a run
    # builds its parameters from its config with these two, never from copied fields.
    @classmethod
    def for_model(cls, m: ModelConfig) -> SamplingParams:
        return cls(m.temperature, m.top_p, None, m.request_timeout_s, m.max_retries, m.retry_backoff_s,
                   m.retry_backoff_max_s, connect_timeout_s=m.connect_timeout_s)

    @classmethod
    def for_judge(cls, j: JudgeConfig) -> SamplingParams:
        """A judge call: the judge's temperature and timeout; one retry at the transport level (a
        malformed verdict is asked again ``judge.max_attempts`` times by the judge stage)."""
        return cls(j.temperature, 1.0, None, j.request_timeout_s, 1, connect_timeout_s=j.connect_timeout_s)


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
    return client(timeout=_timeout(sampling)) if client is not None else None


def _timeout(sampling: SamplingParams) -> Any:
    """The transport's timeouts: ``timeout_s`` per read, write and pool wait, and the shorter
    ``connect_timeout_s`` (never longer than ``timeout_s``) to open a connection."""
    import httpx2  # what this OpenAI SDK builds its requests with

    return httpx2.Timeout(sampling.timeout_s, connect=min(sampling.connect_timeout_s, sampling.timeout_s))


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
            if isinstance(e, httpx2.ConnectTimeout):  # nothing was sent: the endpoint is not there
                raise httpx2.ConnectError(f"no connection within the connect timeout ({cause or e})",
                                          request=request) from cause
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
                                   timeout=_timeout(sampling), max_retries=0, http_client=_http_client(sampling))
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
        kwargs = self._body(messages, max_tokens, json_schema, seed, regex, temperature)
        gate = self.gate or current_gate.get()
        # the budget first (it may wait for room, or refuse): a waiting call holds no slot
        ticket = await gate.reserve(messages, max_tokens) if gate is not None else None
        c: Completion | None = None
        try:
            resp, t0, latency = await self._send(kwargs, retry_budget, endpoint_retries)
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

    def _body(self, messages: list[dict[str, str]], max_tokens: int, json_schema: dict[str, Any] | None,
              seed: int | None, regex: str | None, temperature: float | None) -> dict[str, Any]:
        """The request body: the client's sampling, this call's overrides and constraints."""
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
        return kwargs

    async def _send(self, kwargs: dict[str, Any], retry_budget: RetryBudget | None,
                    endpoint_retries: bool) -> tuple[Any, float, float]:
        """Post the body, retrying what :meth:`chat` says; (response, start, latency) of the
        attempt that answered."""
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
                return resp, t0, latency
            except Exception as e:  # noqa: BLE001 - openai's typed errors, a bad body; classified below
                status = getattr(e, "status_code", None)
                what = f"{type(e).__name__}: {e}" if not isinstance(e, TimeoutError) else \
                    f"TimeoutError: no complete answer within request_timeout_s={self.sampling.timeout_s:g} s"
                what += f" [endpoint {self.endpoint.model} at {where(self.endpoint.base_url)}]"
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


def where(base_url: str) -> str:
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
