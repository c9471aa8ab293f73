"""The HTTP transport under the chat client: the OpenAI SDK's aiohttp transport, with its errors
named as the SDK's httpx transport names them (:func:`http_client`), and the transport's timeouts
(:func:`http_timeout`). httpx's connection pool checks every pooled connection on every request:
with a replica's 64 calls in flight that is most of a client's CPU per call, which the aiohttp
transport does not spend (``perf/client_overhead.py``). aiohttp, httpx2 and the SDK are imported
when the first client is made, never when this module is."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from engine.llm.types import SamplingParams

log = logging.getLogger(__name__)


def http_client(sampling: SamplingParams) -> Any:
    """The SDK's aiohttp transport (``openai.DefaultAioHttpClient``: its own defaults, proxies
    from the environment as httpx reads them) with its errors named as httpx names them, when
    this SDK has it; else None (the SDK's httpx transport)."""
    client = _aiohttp_client_class()
    return client(timeout=http_timeout(sampling)) if client is not None else None


def http_timeout(sampling: SamplingParams) -> Any:
    """The transport's timeouts: ``timeout_s`` per read, write and pool wait, and the shorter
    ``connect_timeout_s`` (never longer than ``timeout_s``) to open a connection."""
    import httpx2  # what this OpenAI SDK builds its requests with

    return httpx2.Timeout(sampling.timeout_s, connect=min(sampling.connect_timeout_s, sampling.timeout_s))


@functools.cache
def _aiohttp_client_class() -> Any:
    """The client class :func:`http_client` makes, defined once per process (None, said once,
    when this SDK has no aiohttp transport)."""
    try:
        import aiohttp
        import httpx2
        from openai import DefaultAioHttpClient
        from openai._vendor.httpx_aiohttp.transport import AiohttpTransport
    except ImportError as e:                  # an SDK without it, or aiohttp missing
        log.warning("model calls use the OpenAI SDK's httpx transport (%s): about twice the CPU per call", e)
        return None
    named = _named_as_httpx(aiohttp, httpx2)
    return _client_class(DefaultAioHttpClient, _transport_class(AiohttpTransport, httpx2.AsyncByteStream, named))


def _httpx_error(e: Any, request: Any, aiohttp: Any, httpx2: Any) -> Any:
    """What httpx would raise for ``e``, a transport error of the SDK's aiohttp map; None: ``e``
    itself. The map sends every aiohttp connection error to ``ConnectTimeout`` (a refused
    connection, a reset), which the SDK reports as "Request timed out."; httpx says ``ConnectError``
    or ``ReadError`` (the SDK's "Connection error.")."""
    cause = e.__cause__
    if isinstance(e, httpx2.ConnectTimeout):  # nothing was sent: the endpoint is not there
        return httpx2.ConnectError(f"no connection within the connect timeout ({cause or e})", request=request)
    if cause is None or isinstance(cause, TimeoutError):
        return None
    if isinstance(cause, aiohttp.ClientConnectorError):
        return httpx2.ConnectError(str(cause), request=request)
    if isinstance(cause, aiohttp.ServerDisconnectedError):
        return httpx2.RemoteProtocolError(str(cause), request=request)
    if isinstance(cause, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)):
        return httpx2.ReadError(str(cause) or type(cause).__name__, request=request)
    return None


def _named_as_httpx(aiohttp: Any, httpx2: Any) -> Callable[[Any], AbstractContextManager[None]]:
    """A context manager around a request's sending or reading that raises its transport errors
    as httpx names them (:func:`_httpx_error`), keeping the cause."""
    @contextlib.contextmanager
    def named(request: Any) -> Iterator[None]:
        try:
            yield
        except httpx2.TransportError as e:
            renamed = _httpx_error(e, request, aiohttp, httpx2)
            if renamed is None:
                raise
            raise renamed from e.__cause__
    return named


def _transport_class(base: Any, byte_stream: Any, named: Callable[[Any], AbstractContextManager[None]]) -> Any:
    """The SDK's aiohttp transport (``base``), its errors and its response bodies' errors
    ``named`` as httpx names them."""
    class Body(byte_stream):  # type: ignore[misc]
        def __init__(self, inner: Any, request: Any) -> None:
            self.inner, self.request = inner, request

        async def __aiter__(self) -> Any:
            with named(self.request):
                async for chunk in self.inner:
                    yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    class Transport(base):  # type: ignore[misc]
        async def handle_async_request(self, request: Any) -> Any:
            with named(request):
                response = await super().handle_async_request(request)
            response.stream = Body(response.stream, request)
            return response

    return Transport


def _client_class(base: Any, transport: Any) -> Any:
    """The SDK's aiohttp client (``base``), its transports made as ``transport``."""
    class Client(base):  # type: ignore[misc]
        def _init_transport(self, **kw: Any) -> Any:  # called with keywords only
            return kw.get("transport") or transport(**{k: v for k, v in kw.items() if k != "transport"})

        def _init_proxy_transport(self, proxy: Any, **kw: Any) -> Any:
            return transport(proxy=proxy, **kw)

    return Client
