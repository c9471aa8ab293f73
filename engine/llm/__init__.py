"""The model client: an OpenAI-compatible async client with token accounting and sticky replica
routing (``client``, ``router``; their data and errors in ``types``, what they retry in ``retry``,
the HTTP transport in ``transport``), every model call as a row (``transcripts``), and the agents'
action parsing (``actions``). ``engine.llm`` re-exports the client's public names (plugins import
them from here)."""

from engine.llm.client import ChatClient
from engine.llm.retry import RETRY_STATUS, endpoint_down, retry_after, retryable, unreachable
from engine.llm.router import EpisodeClient, ReplicaUnavailable, Router
from engine.llm.types import (
    Completion,
    Endpoint,
    GenerationError,
    MalformedResponse,
    RequestRejected,
    RetryBudget,
    SamplingParams,
    Usage,
)

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
