"""A TCP forwarder from a loopback port to the node's address, for the node e2e suite's `localhost:10255/metrics`.

The suite polls the kubelet's Prometheus metrics at `localhost:10255/metrics` (`logKubeletLatencyMetrics`,
`nodeNameOrIP()` is "localhost" in e2e_node/util.go), whatever `address` the config gives. Upstream's own node e2e
runs start the kubelet with the default `address: 0.0.0.0`, so loopback reaches its read-only server. A testbed's
node listens on its own node IP instead (other testbeds on the machine hold ports 10250 and 10255 on theirs, so
0.0.0.0 would collide), for nodeagent and the upstream kubelet alike. The node serves /metrics on the read-only port
(as upstream's read-only server does); this forwarder makes `127.0.0.1:10255` reach it for the length of a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

log = logging.getLogger(__name__)
_CHUNK = 65536
_Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()


def _handler(target: tuple[str, int]) -> _Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
        except OSError as exc:
            # The node is down (the suite stops it between config changes): refuse as the node itself would.
            log.debug("loopback forward refused target=%s:%d error=%s", target[0], target[1], exc)
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    return handle


@contextlib.asynccontextmanager
async def forward(listen: tuple[str, int], target: tuple[str, int]) -> AsyncIterator[asyncio.Server]:
    """Forward connections to `listen` onto `target` while the context is open."""
    server = await asyncio.start_server(_handler(target), listen[0], listen[1])
    log.info("loopback forward started listen=%s:%d target=%s:%d", *listen, *target)
    try:
        yield server
    finally:
        server.close()
        with contextlib.suppress(TimeoutError):  # a client's idle keep-alive connection must not hold the run
            await asyncio.wait_for(server.wait_closed(), 5)
        log.info("loopback forward stopped listen=%s:%d", *listen)
