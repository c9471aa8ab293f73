"""The model client episodes see: an OpenAI-compatible chat endpoint with token accounting.

An episode never knows whether the endpoint is a vLLM replica dateline hosts or an external
API; it gets a :class:`ChatClient` with a base URL. Every call's prompt and completion token
counts (as reported by the server) and latency are returned with the text.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Endpoint:
    """Where a model is served: a hosted replica or an external endpoint look the same."""
    base_url: str
    model: str
    api_key_env: str = ""
    replica: int = 0


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
    max_retries: int = 2


class ChatClient:
    def __init__(self, endpoint: Endpoint, sampling: SamplingParams, max_inflight: int = 8) -> None:
        from openai import AsyncOpenAI

        key = os.environ.get(endpoint.api_key_env, "") if endpoint.api_key_env else ""
        self.endpoint = endpoint
        self.sampling = sampling
        self._client = AsyncOpenAI(base_url=endpoint.base_url, api_key=key or "EMPTY",
                                   timeout=sampling.timeout_s, max_retries=sampling.max_retries)
        self._slots = asyncio.Semaphore(max_inflight)
        self.usage = Usage()

    async def chat(self, messages: list[dict[str, str]], max_tokens: int,
                   json_schema: dict[str, Any] | None = None, seed: int | None = None,
                   regex: str | None = None, temperature: float | None = None) -> Completion:
        """One chat completion. ``json_schema`` / ``regex`` constrain decoding (vLLM structured
        outputs; ``regex`` is vLLM-specific and sent as ``structured_outputs``). ``temperature``
        overrides the client's sampling temperature for this call (e.g. a benchmark's own)."""
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
            kwargs["extra_body"] = {"structured_outputs": {"regex": regex}}
        async with self._slots:
            t0 = time.perf_counter()
            try:
                resp = await self._client.chat.completions.create(**kwargs)
            except Exception as e:  # openai raises typed errors; all end the episode the same way
                status = getattr(e, "status_code", None)
                if isinstance(status, int) and 400 <= status < 500 and status not in (401, 403, 404, 408, 429):
                    raise RequestRejected(f"{type(e).__name__}: {e}") from e
                raise GenerationError(f"{type(e).__name__}: {e}") from e
            latency = time.perf_counter() - t0
        choice = resp.choices[0]
        usage = resp.usage
        c = Completion(text=choice.message.content or "",
                       prompt_tokens=int(usage.prompt_tokens) if usage else 0,
                       completion_tokens=int(usage.completion_tokens) if usage else 0,
                       latency_s=latency, finish_reason=choice.finish_reason or "")
        self.usage.add(c)
        return c

    async def close(self) -> None:
        await self._client.close()


@dataclass
class Router:
    """Sticky routing: all turns of an episode go to one replica, so its prefix cache is reused."""
    endpoints: list[Endpoint]
    sampling: SamplingParams
    max_inflight_per_replica: int = 8
    _clients: dict[int, ChatClient] = field(default_factory=dict)

    def client_for(self, episode_id: str) -> ChatClient:
        i = zlib.crc32(episode_id.encode()) % len(self.endpoints)
        if i not in self._clients:
            self._clients[i] = ChatClient(self.endpoints[i], self.sampling, self.max_inflight_per_replica)
        return self._clients[i]

    async def close(self) -> None:
        for c in self._clients.values():
            await c.close()
