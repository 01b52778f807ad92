"""Runtime endpoints: unix sockets only, given as unix:///path or an absolute path; anything else fails early."""

from __future__ import annotations

import pytest

from cri.channel import parse_endpoint
from cri.client import connect
from cri.errors import EndpointError


@pytest.mark.parametrize(
    ("endpoint", "path"),
    [
        ("unix:///run/containerd/containerd.sock", "/run/containerd/containerd.sock"),
        ("/run/containerd/containerd.sock", "/run/containerd/containerd.sock"),
        ("unix:///tmp/a b/c.sock", "/tmp/a b/c.sock"),
    ],
)
def test_unix_endpoints_give_the_socket_path(endpoint: str, path: str) -> None:
    assert parse_endpoint(endpoint) == path


@pytest.mark.parametrize(
    ("endpoint", "complaint"),
    [
        ("", "empty runtime endpoint"),
        ("tcp://127.0.0.1:2376", "uses scheme 'tcp': only unix sockets are supported"),
        ("npipe:////./pipe/containerd-containerd", "uses scheme 'npipe'"),
        ("http://localhost/run.sock", "uses scheme 'http'"),
        ("unix://run/containerd.sock", "is not of the form unix:///absolute/path"),
        ("unix:containerd.sock", "is not of the form unix:///absolute/path"),
        ("unix:///run/x.sock?mode=1", "is not of the form unix:///absolute/path"),
        ("run/containerd/containerd.sock", "is a relative path"),
    ],
)
def test_other_endpoints_are_refused_with_a_clear_message(endpoint: str, complaint: str) -> None:
    with pytest.raises(EndpointError) as caught:
        parse_endpoint(endpoint)
    assert complaint in str(caught.value)
    if endpoint:
        assert repr(endpoint) in str(caught.value)


async def test_connect_refuses_a_tcp_endpoint_before_dialling() -> None:
    with pytest.raises(EndpointError, match="only unix sockets"):
        connect("tcp://127.0.0.1:1")
