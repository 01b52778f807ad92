"""The tcpSocket probe (upstream pkg/probe/tcp): success when a TCP connection opens within the timeout.

The host is the probe's own or the pod IP. The connection is closed at once with SO_LINGER 0 (a reset, not a FIN),
as upstream's ProbeDialer does, so frequent probes do not pile up TIME_WAIT sockets on the node. A refused or timed
out connection is a failure with Go's message ("dial tcp HOST:PORT: connect: connection refused", "... i/o timeout").
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct

from nodeagent.prober.probe import Outcome, ProbeOutcome, dial_error_text, join_host_port


async def probe_tcp(host: str, port: int, timeout: float) -> ProbeOutcome:
    address = join_host_port(host, port)
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        return ProbeOutcome(Outcome.FAILURE, f"dial tcp {address}: i/o timeout")
    except OSError as exc:
        return ProbeOutcome(Outcome.FAILURE, f"dial tcp {address}: {dial_error_text(exc)}")
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return ProbeOutcome(Outcome.SUCCESS)
