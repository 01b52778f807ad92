"""The runtime channel's reconnect back-off is upstream's (k8s.io/cri-client v0.34.4, remote_runtime.go and
remote_image.go: grpc.ConnectParams with BaseDelay 100 ms, MaxDelay 3 s, MinConnectTimeout 5 s), not gRPC's default
(1 s growing to 120 s), which kept the node "runtime is down" for 105 s after containerd came back (issue 34). The
integration test tests/integration/test_runtime_outage.py shows the effect on a real containerd."""

from __future__ import annotations

import pytest

from cri.channel import MAX_MESSAGE_SIZE, channel_options


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("grpc.initial_reconnect_backoff_ms", 100),  # upstream baseBackoffDelay
        ("grpc.max_reconnect_backoff_ms", 3_000),  # upstream maxBackoffDelay
        ("grpc.min_reconnect_backoff_ms", 5_000),  # upstream minConnectionTimeout (gRPC core's name for it)
        ("grpc.max_receive_message_length", MAX_MESSAGE_SIZE),
    ],
)
def test_channel_arguments_are_upstreams(argument: str, value: int) -> None:
    assert dict(channel_options())[argument] == value


def test_every_argument_is_set_once() -> None:
    names = [name for name, _ in channel_options()]
    assert len(names) == len(set(names))
