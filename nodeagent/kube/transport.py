"""The HTTP transport under `KubeClient`: how connections to the apiserver are kept and closed.

Three things differ from httpx's defaults, measured on `nodeagent fleet` (docs/fleet.md):
- **Idle connections are kept 90 s**, as client-go's transport keeps them (`IdleConnTimeout`), not httpx's 5 s,
  which is shorter than the 10 s lease renewal: nearly every renewal was a new TCP connection and TLS handshake,
  several turns of a busy event loop each (fleet, 100 nodes x 3 pods: lease renewal p99 19-22 s with 5 s, 12 s
  with 90 s).
- **Every connection can be closed at once** (`close_connections`), as upstream's kubelet closes them all when its
  client certificate rotates (pkg/kubelet/certificate/transport.go): a connection keeps the certificate of its
  handshake, and with a request every few seconds a kept one is never idle long enough to go. Without that, a
  certificate that expired during an apiserver outage and was renewed went on being presented: 401 Unauthorized
  until the test gave up (the clean-clone CI runs at 866475f with 90 s, and at 556e353 even with 5 s).
- **Expired idle connections can be closed without a request** (`close_expired`). httpcore closes them only when a
  request comes to the pool. A fleet node's client sends its periodic requests over the direct connection
  (`kube/direct.py`), so the connections its start-up opened stayed open, idle, for the node's life: a fleet of
  5 nodes held 40 connections to the apiserver against main's 30 (docs/fleet.md).
- **A TLS handshake cancelled half-way closes its socket.** httpcore closes the TCP stream when the handshake fails
  with an Exception, not when the task is cancelled (a BaseException): the stream is then referenced by nothing that
  the pool closes, and the garbage collector finds an open asyncio transport ("unclosed transport"). An agent that
  stops while one of its requests is connecting hits this; a fleet stopping many nodes together hits it often.
"""

from __future__ import annotations

import ssl
import typing

import anyio
import httpcore
import httpx

# client-go's IdleConnTimeout (utilnet.SetTransportDefaults); safe only because a rotation closes every connection.
KEEPALIVE_EXPIRY = 90.0
# httpx's defaults for the rest.
MAX_CONNECTIONS = 100
MAX_KEEPALIVE_CONNECTIONS = 20


class _ClosingStream(httpcore.AsyncNetworkStream):
    """A TCP stream whose `start_tls` closes it however the handshake ends early, cancellation included."""

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        try:
            return await self._stream.start_tls(ssl_context, server_hostname, timeout)
        except BaseException:
            # Shielded: the task may be cancelled, and the close must still run to its end.
            with anyio.CancelScope(shield=True):
                await self._stream.aclose()
            raise

    def get_extra_info(self, info: str) -> typing.Any:
        return self._stream.get_extra_info(info)


class _ClosingBackend(httpcore.AsyncNetworkBackend):
    def __init__(self) -> None:
        self._backend = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        return _ClosingStream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _ClosingStream(await self._backend.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


class ApiTransport(httpx.AsyncHTTPTransport):
    """httpx's transport with the pool above: 90 s keep-alive, a closing TLS start, and every connection closed on
    demand."""

    def __init__(self, tls: ssl.SSLContext) -> None:
        limits = httpx.Limits(
            max_connections=MAX_CONNECTIONS,
            max_keepalive_connections=MAX_KEEPALIVE_CONNECTIONS,
            keepalive_expiry=KEEPALIVE_EXPIRY,
        )
        super().__init__(verify=tls, limits=limits)
        self._tls = tls
        self._limits = limits
        # httpx takes no network backend, so its pool is rebuilt with the same settings and ours (httpcore's public
        # constructor); tests/unit/kube/test_transport.py fails if httpx stops using `_pool`.
        self._pool = self._new_pool()

    def _new_pool(self) -> httpcore.AsyncConnectionPool:
        return httpcore.AsyncConnectionPool(
            ssl_context=self._tls,
            max_connections=self._limits.max_connections,
            max_keepalive_connections=self._limits.max_keepalive_connections,
            keepalive_expiry=self._limits.keepalive_expiry,
            http1=True,
            http2=False,
            network_backend=_ClosingBackend(),
        )

    async def close_expired(self) -> int:
        """Close the pool's connections that are closed, past their keep-alive, or closed by the server, as httpcore
        does when a request comes to the pool (`_assign_requests_to_connections`); how many were closed."""
        pool = self._pool
        with pool._optional_thread_lock:
            gone = [c for c in pool._connections if c.is_closed() or c.has_expired()]
            for connection in gone:
                pool._connections.remove(connection)
        for connection in gone:
            await connection.aclose()
        return len(gone)

    async def close_connections(self) -> None:
        """Close every connection, idle or in use (a watch, a request waiting for its answer), as upstream's kubelet
        does when its client certificate rotates (pkg/kubelet/certificate/transport.go): each connection keeps the
        certificate of its handshake. Requests from now on go to a new pool and handshake again; one cut short
        fails as if the connection had dropped, and its caller retries as it would then."""
        old, self._pool = self._pool, self._new_pool()
        await old.aclose()
