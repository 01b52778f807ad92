"""A test's own HTTP server on 127.0.0.1 (a port the kernel picks), for the client tests that need a real socket:
the server object decides how to answer, `serving` listens for it and closes the listener on the way out."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Protocol, TypeVar


class LoopbackServer(Protocol):
    port: int  # set by `serving` once the listener is bound

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None: ...


ServerT = TypeVar("ServerT", bound=LoopbackServer)


@contextlib.asynccontextmanager
async def serving(server: ServerT) -> AsyncIterator[ServerT]:
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    server.port = listener.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        listener.close()
        await listener.wait_closed()
