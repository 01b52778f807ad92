"""The helpers every handler shares: port resolution and upstream's message formats."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from nodeagent.prober.probe import (
    USER_AGENT,
    ProbeError,
    go_code_name,
    go_duration,
    join_host_port,
    resolve_container_port,
    truncate,
)

CONTAINER: dict[str, Any] = {"name": "app", "ports": [{"name": "http", "containerPort": 8080}]}


@pytest.mark.parametrize(
    ("port", "expected"),
    [(80, 80), ("http", 8080), ("8081", 8081), (65535, 65535)],
)
def test_resolve_container_port(port: int | str, expected: int) -> None:
    assert resolve_container_port(port, CONTAINER) == expected


@pytest.mark.parametrize(
    ("port", "message"),
    [
        ("web", 'strconv.Atoi: parsing "web": invalid syntax'),
        (0, "invalid port number: 0"),
        (70000, "invalid port number: 70000"),
        ("-1", "invalid port number: -1"),
    ],
)
def test_resolve_container_port_errors(port: int | str, message: str) -> None:
    with pytest.raises(ProbeError) as caught:
        resolve_container_port(port, CONTAINER)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("host", "port", "expected"),
    [("198.18.0.5", 80, "198.18.0.5:80"), ("fd00::5", 80, "[fd00::5]:80"), ("example.test", 8080, "example.test:8080")],
)
def test_join_host_port(host: str, port: int, expected: str) -> None:
    assert join_host_port(host, port) == expected


@pytest.mark.parametrize(
    ("seconds", "expected"), [(1, "1s"), (0.5, "0.5s"), (59, "59s"), (60, "1m0s"), (90, "1m30s"), (3600, "1h0m0s")]
)
def test_go_duration(seconds: float, expected: str) -> None:
    assert go_duration(seconds) == expected


def test_go_code_names_and_limits() -> None:
    assert go_code_name(grpc.StatusCode.DEADLINE_EXCEEDED) == "DeadlineExceeded"
    assert go_code_name(grpc.StatusCode.NOT_FOUND) == "NotFound"
    assert go_code_name(None) == "Unknown"
    assert truncate(b"x" * 20_000) == "x" * 10 * 1024
    assert USER_AGENT == "kube-probe/1.34"  # the emulated Kubernetes release, as upstream's own version
