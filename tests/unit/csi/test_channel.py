"""Which plugin endpoints the client accepts: unix sockets only, absolute, as `unix:///path` or a bare path."""

from __future__ import annotations

import pytest

from csi.channel import parse_endpoint
from csi.errors import EndpointError


@pytest.mark.parametrize(
    ("endpoint", "path"),
    [
        (
            "unix:///var/lib/kubelet/plugins/csi.example.com/csi.sock",
            "/var/lib/kubelet/plugins/csi.example.com/csi.sock",
        ),
        ("/csi/csi.sock", "/csi/csi.sock"),
    ],
)
def test_accepted(endpoint: str, path: str) -> None:
    assert parse_endpoint(endpoint) == path


@pytest.mark.parametrize(
    "endpoint",
    ["", "csi.sock", "tcp://127.0.0.1:10000", "unix://csi.sock", "unix:///csi.sock?x=1", "unix://host/csi.sock"],
)
def test_refused(endpoint: str) -> None:
    with pytest.raises(EndpointError):
        parse_endpoint(endpoint)
