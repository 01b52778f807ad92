"""The HTTP transport under `KubeClient`: how connections to the apiserver are kept and closed.

One thing differs from httpx's defaults, measured on `nodeagent fleet` (docs/fleet.md):
- **Idle connections are kept 5 s (httpx's default), not client-go's 90 s, for now.** 90 s (client-go's
  `IdleConnTimeout`) made the fleet's lease renewals reuse their connection instead of a new TCP connection and TLS
  handshake each (p99 19-22 s -> 12 s at 100 nodes). But it broke client certificate rotation: a connection keeps
  the certificate of its handshake, and with renewals every few seconds none was ever idle 90 s, so after a
  certificate expired during an apiserver outage and was renewed, every request still went out on connections with
  the expired certificate (401 Unauthorized until the test gave up; the clean-clone CI run at 866475f and a rerun).
  Upstream's kubelet closes every connection when its client certificate rotates
  (pkg/kubelet/certificate/transport.go); that comes first, then the 90 s.
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

# httpx's default. client-go keeps 90 s (utilnet.SetTransportDefaults, IdleConnTimeout), which needs the connections
# closed at a client certificate rotation first (see the module docstring).
KEEPALIVE_EXPIRY = 5.0
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
    """httpx's transport with the pool above: a closing TLS start."""

    def __init__(self, tls: ssl.SSLContext) -> None:
        limits = httpx.Limits(
            max_connections=MAX_CONNECTIONS,
            max_keepalive_connections=MAX_KEEPALIVE_CONNECTIONS,
            keepalive_expiry=KEEPALIVE_EXPIRY,
        )
        super().__init__(verify=tls, limits=limits)
        # httpx takes no network backend, so its pool is rebuilt with the same settings and ours (httpcore's public
        # constructor); tests/unit/kube/test_transport.py fails if httpx stops using `_pool`.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=tls,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=True,
            http2=False,
            network_backend=_ClosingBackend(),
        )
