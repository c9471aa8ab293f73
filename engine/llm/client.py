"""The model client episodes see: an OpenAI-compatible chat endpoint with token accounting.

An episode never knows whether the endpoint is a vLLM replica dateline hosts or an external
API; it gets a :class:`ChatClient` with a base URL. Every call's prompt and completion token
counts (as reported by the server) and latency are returned with the text. The client's data
and errors are in :mod:`engine.llm.types`, which failures it retries in :mod:`engine.llm.retry`,
its HTTP transport in :mod:`engine.llm.transport`; this module re-exports their public names.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from engine.budget.gate import BudgetGate, current_gate
from engine.llm.retry import RETRY_STATUS as RETRY_STATUS
from engine.llm.retry import endpoint_down as endpoint_down
from engine.llm.retry import retry_after as retry_after
from engine.llm.retry import retryable as retryable
from engine.llm.retry import unreachable as unreachable
from engine.llm.retry import where as where
from engine.llm.transport import http_client, http_timeout
from engine.llm.types import Completion as Completion
from engine.llm.types import Endpoint as Endpoint
from engine.llm.types import GenerationError as GenerationError
from engine.llm.types import MalformedResponse as MalformedResponse
from engine.llm.types import RequestRejected as RequestRejected
from engine.llm.types import RetryBudget as RetryBudget
from engine.llm.types import SamplingParams as SamplingParams
from engine.llm.types import Usage as Usage


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
                                   timeout=http_timeout(sampling), max_retries=0, http_client=http_client(sampling))
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

