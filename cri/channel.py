"""Opening a gRPC channel to a container runtime's unix socket.

The kubelet accepts `unix:///path/to/socket` and, for compatibility, a bare path. Runtimes on Linux listen on unix
sockets only, so any other scheme is refused here, before anything is dialled, with an `EndpointError` that names
the endpoint. Relative paths are refused too: they would depend on the agent's working directory.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import grpc

from cri.errors import EndpointError

# As the kubelet's CRI client: 16 MiB instead of gRPC's 4 MiB default, since ListContainers, ListPodSandboxStats and
# verbose status answers of a busy node exceed 4 MiB. Like upstream, only receiving is raised.
MAX_MESSAGE_SIZE = 16 * 1024 * 1024


def parse_endpoint(endpoint: str) -> str:
    """The absolute socket path of `endpoint` (`unix:///path` or `/path`); EndpointError for anything else."""
    if not endpoint:
        raise EndpointError("empty runtime endpoint: expected unix:///path/to/socket")
    if endpoint.startswith("/"):
        return endpoint
    parts = urlsplit(endpoint)
    if not parts.scheme:
        raise EndpointError(f"runtime endpoint {endpoint!r} is a relative path: expected unix:///absolute/path")
    if parts.scheme != "unix":
        raise EndpointError(
            f"runtime endpoint {endpoint!r} uses scheme {parts.scheme!r}: only unix sockets are supported "
            "(unix:///path/to/socket)"
        )
    if parts.netloc or not parts.path.startswith("/") or parts.query or parts.fragment:
        raise EndpointError(f"runtime endpoint {endpoint!r} is not of the form unix:///absolute/path")
    return parts.path


def open_channel(endpoint: str) -> grpc.aio.Channel:
    """An insecure grpc.aio channel to the runtime's socket. Connects lazily, on the first call.

    Call from a running event loop; close with `await channel.close()`.
    """
    path = parse_endpoint(endpoint)
    return grpc.aio.insecure_channel(
        f"unix://{path}",
        options=[("grpc.max_receive_message_length", MAX_MESSAGE_SIZE)],
    )
