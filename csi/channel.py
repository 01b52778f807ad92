"""Opening a gRPC channel to a CSI plugin's unix socket.

Plugins register their endpoint as `unix:///path/to/csi.sock` or, as node-driver-registrar often does, as a bare
absolute path; both are accepted. Anything else (another scheme, a relative path) is refused with an `EndpointError`
before anything is dialled.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import grpc

from csi.errors import EndpointError


def parse_endpoint(endpoint: str) -> str:
    """The absolute socket path of `endpoint` (`unix:///path` or `/path`); EndpointError for anything else."""
    if not endpoint:
        raise EndpointError("empty CSI endpoint: expected unix:///path/to/csi.sock")
    if endpoint.startswith("/"):
        return endpoint
    parts = urlsplit(endpoint)
    if not parts.scheme:
        raise EndpointError(f"CSI endpoint {endpoint!r} is a relative path: expected unix:///absolute/path")
    if parts.scheme != "unix":
        raise EndpointError(f"CSI endpoint {endpoint!r} uses scheme {parts.scheme!r}: only unix sockets are supported")
    if parts.netloc or not parts.path.startswith("/") or parts.query or parts.fragment:
        raise EndpointError(f"CSI endpoint {endpoint!r} is not of the form unix:///absolute/path")
    return parts.path


def open_channel(endpoint: str) -> grpc.aio.Channel:
    """An insecure grpc.aio channel to the plugin's socket. Connects lazily, on the first call.

    As upstream's kubelet (newGrpcConn): insecure, authority "localhost", gRPC's default message sizes. Call from a
    running event loop; close with `await channel.close()`.
    """
    path = parse_endpoint(endpoint)
    return grpc.aio.insecure_channel(f"unix://{path}", options=[("grpc.default_authority", "localhost")])
