"""HTTPServer.close() ends kept-alive TLS connections at once, as Go's Server.Close: it does not wait for a client
that holds an idle connection and never answers the TLS shutdown (an apiserver's pooled connection to a kubelet)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from pathlib import Path

from nodeagent.server.http import HTTPServer, Request, Responder
from nodeagent.server.tls import self_signed_pair, server_context


async def hello(request: Request, responder: Responder) -> None:
    await responder.text(200, "hello")


def silent_client(port: int, answered: threading.Event, release: threading.Event) -> None:
    """One kept-alive request, then silence (no reads, no close) until released."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port)) as raw, context.wrap_socket(raw) as tls:
        tls.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while b"hello" not in data:
            data += tls.recv(4096)
        answered.set()
        release.wait(60)


async def test_close_does_not_wait_for_a_silent_tls_client(tmp_path: Path) -> None:
    cert, key = self_signed_pair(tmp_path, "node", ("127.0.0.1",))
    server = HTTPServer(hello, ssl_context=server_context(cert, key))
    port = await server.listen("127.0.0.1", 0)
    answered, release = threading.Event(), threading.Event()
    client = asyncio.create_task(asyncio.to_thread(silent_client, port, answered, release))
    try:
        await asyncio.to_thread(answered.wait, 30)
        assert answered.is_set() and server.connection_count == 1
        # The client answers nothing until close() has returned: a graceful TLS shutdown would wait for it (30 s,
        # asyncio's SSL shutdown timeout), which this deadlock guard does not allow.
        await asyncio.wait_for(server.close(), 20)
        assert server.connection_count == 0
    finally:
        release.set()
        await client
