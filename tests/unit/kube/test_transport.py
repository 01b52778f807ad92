"""KubeClient's own transport against a real socket on loopback: connections kept between heartbeats, and a TLS
handshake cut short by a cancel closes its socket."""

from __future__ import annotations

import asyncio
import gc
import time
import types
import warnings

import httpcore
import pytest

from nodeagent.kube.client import KubeClient
from nodeagent.kube.kubeconfig import ClusterCredentials
from nodeagent.nodestatus.lease import LEASE_RENEW_FRACTION
from tests.unit.kube.loopback import serving

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


class Server:
    """Counts connections; answers every request `{}` (keeping the connection), or never speaks at all."""

    def __init__(self, *, answer: bool) -> None:
        self.answer = answer
        self.connections = 0
        self.spoke = asyncio.Event()  # the client sent its first bytes (a request, or a TLS ClientHello)
        self.closed = asyncio.Event()  # the client closed a connection
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while await reader.read(65536):
                self.spoke.set()
                if self.answer:
                    writer.write(ANSWER)
                    await writer.drain()
            self.closed.set()
        finally:
            writer.close()


async def test_a_connection_outlives_the_lease_renew_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx drops an idle connection after 5 s, so every 10 s renewal made a new connection and TLS handshake; kept
    90 s, the renewal reuses it."""
    renew = 40 * LEASE_RENEW_FRACTION
    offset = 0.0
    clock = types.SimpleNamespace(monotonic=lambda: time.monotonic() + offset)
    monkeypatch.setattr(httpcore._async.http11, "time", clock)  # the connection's idea of idle time only
    async with (
        serving(Server(answer=True)) as server,
        KubeClient(ClusterCredentials(server=f"http://127.0.0.1:{server.port}")) as client,
    ):
        await client.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1")
        offset = renew + 1
        await client.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1")
    assert server.connections == 1


async def test_a_tls_handshake_cancelled_half_way_closes_its_socket() -> None:
    """A node stopping while a request connects: the socket is closed then, not left to the garbage collector."""
    async with serving(Server(answer=False)) as server:
        credentials = ClusterCredentials(server=f"https://127.0.0.1:{server.port}", insecure_skip_tls_verify=True)
        client = KubeClient(credentials)
        request = asyncio.create_task(client.get("/api/v1/nodes/n1"))
        await asyncio.wait_for(server.spoke.wait(), 10)  # the ClientHello: the client waits in the handshake
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        await client.aclose()
        await asyncio.wait_for(server.closed.wait(), 5)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del request
            gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
