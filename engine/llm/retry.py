"""Which failures of a model call are worth another try, and whose they are: the retryable
statuses and errors (:func:`retryable`), the wait a server asks for (:func:`retry_after`), a failure
of the endpoint rather than of the request (:func:`unreachable`, :func:`endpoint_down`), and the
endpoint as an error names it (:func:`where`). The client (:mod:`engine.llm.client`) and the router
decide with these; nothing here sends a request."""

from __future__ import annotations

import json
import time

from engine.llm.types import MalformedResponse

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
