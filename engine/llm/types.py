"""The client's vocabulary: where a model is served (:class:`Endpoint`), what a call returns
(:class:`Completion`, :class:`Usage`), how it samples and retries (:class:`SamplingParams`,
:class:`RetryBudget`), and how a call fails (:class:`GenerationError` and its kinds,
:class:`MalformedResponse`). Plain data: the client (:mod:`engine.llm.client`), the router and the
retry rules (:mod:`engine.llm.retry`) share it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.config.schema import JudgeConfig, ModelConfig


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


class MalformedResponse(RuntimeError):
    """A 200 answer without what a chat completion must carry (no choices, no message)."""
