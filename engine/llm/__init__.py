"""The model client: an OpenAI-compatible async client with token accounting and sticky replica
routing (``client``, ``router``), every model call as a row (``transcripts``), and the agents' action parsing
(``actions``). ``engine.llm`` re-exports the client's public names (plugins import them from here)."""

from engine.llm.client import (
    RETRY_STATUS,
    ChatClient,
    Completion,
    Endpoint,
    GenerationError,
    MalformedResponse,
    RequestRejected,
    RetryBudget,
    SamplingParams,
    Usage,
    endpoint_down,
    retry_after,
    retryable,
    unreachable,
)
from engine.llm.router import EpisodeClient, ReplicaUnavailable, Router

__all__ = [
    "ChatClient",
    "Completion",
    "Endpoint",
    "EpisodeClient",
    "GenerationError",
    "MalformedResponse",
    "RETRY_STATUS",
    "ReplicaUnavailable",
    "RequestRejected",
    "RetryBudget",
    "Router",
    "SamplingParams",
    "Usage",
    "endpoint_down",
    "retry_after",
    "retryable",
    "unreachable",
]
