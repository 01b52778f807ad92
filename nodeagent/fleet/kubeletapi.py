"""The kubelet API of every emulated node, on one port per fleet process.

The apiserver reaches a node's kubelet at `https://<InternalIP>:<daemonEndpoints.kubeletEndpoint.Port>` (logs, exec,
`nodes/<name>/proxy`, metrics-server's scrapes). Seen on the testbed (apiserver v1.34.4, `nodes/N/proxy/healthz`):
the path is the kubelet's own (`/healthz`), no TLS server name (an IP address), and a Host header with the
apiserver's own address, not the node's. Only the node proxy adds `X-Forwarded-Uri: /api/v1/nodes/N/proxy/...`;
`pods/log` and metrics-server's scrapes name no node at all. So the node is told by the address the connection came
in on. Every node advertises
its own InternalIP and the fleet's one port; the fleet listens on that port on each node's address (one socket per
node, one port), and `KubeletRouter` hands each request to the `KubeletServer` of the node whose address it came in
on, each with its own host, stats, metrics and auth (webhooks through the node's own credential).

The node addresses must be local for that: on one machine, `ip route add local <node-network> dev lo` makes a range
local without an address per node (a loopback range would not do: the apiserver refuses to proxy to loopback and
link-local addresses, `isProxyableHostname`). One TLS context serves every node: a certificate whose SANs hold
every node address (`--tls-cert-file`, issued by the CA the apiserver trusts for kubelets), or a self-signed one.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
from collections.abc import Callable, Sequence
from pathlib import Path

from nodeagent.fleet.plan import FleetError
from nodeagent.server.http import Handler, HTTPServer, Request, Responder
from nodeagent.server.tls import self_signed_pair, server_context

log = logging.getLogger(__name__)


class KubeletRouter:
    """Requests by the address they came in on, to the handler of the node at that address."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    @property
    def routed(self) -> int:
        return len(self._handlers)

    def route(self, address: str, handler: Handler) -> Callable[[], None]:
        """Serve `address`'s requests with `handler` (a node's `KubeletServer.handle`); the callable undoes it."""
        if address in self._handlers:
            raise FleetError(f"two nodes with the kubelet API address {address}")
        self._handlers[address] = handler

        def unroute() -> None:
            if self._handlers.get(address) is handler:
                del self._handlers[address]

        return unroute

    async def handle(self, request: Request, responder: Responder) -> None:
        handler = self._handlers.get(request.local)
        if handler is None:
            # A node that has not started yet, or has stopped: as a kubelet that is not serving, but the
            # connection was accepted, so it is told in words.
            await responder.text(503, f"no emulated node serves {request.local} now")
            return
        await handler(request, responder)


def fleet_tls(
    directory: Path,
    addresses: Sequence[str],
    *,
    cert_file: Path | None,
    key_file: Path | None,
    client_ca_file: str,
) -> ssl.SSLContext:
    """The one TLS context of the fleet's kubelet API. Without a given pair, a self-signed certificate for every node
    address (made once, in `directory`, for this set of addresses)."""
    if (cert_file is None) != (key_file is None):
        raise FleetError("--tls-cert-file and --tls-private-key-file go together")
    if cert_file is None or key_file is None:
        # Kept by the set of addresses, so that a fleet of other nodes does not reuse a certificate not for them.
        digest = hashlib.sha256(",".join(addresses).encode()).hexdigest()[:16]
        cert_file, key_file = self_signed_pair(directory / digest, "nodeagent-fleet", tuple(addresses))
    return server_context(cert_file, key_file, client_ca_file)


async def listen(router: KubeletRouter, tls: ssl.SSLContext, addresses: Sequence[str], port: int) -> HTTPServer:
    """One listening socket per node address, all on `port`."""
    http = HTTPServer(router.handle, ssl_context=tls)
    try:
        await http.listen(list(addresses), port)
    except OSError as exc:
        raise FleetError(
            f"the kubelet API cannot listen on port {port} of the node addresses ({exc}); they must be local to "
            "this machine: `ip route add local <node-network> dev lo`"
        ) from exc
    log.info("fleet kubelet api listening port=%d addresses=%d", port, len(addresses))
    return http
