"""The DRA specs' proxy (nodeagent/testbed/hostpathproxy/main.go, built as `nodeagent conformance --preset devices`
builds it): a connection on its unix socket is paired with the next one on its TCP port and bytes go both ways, as
hostpathplugin's proxy mode does for upstream's e2e DRA driver. No testbed: the binary and two sockets. About 1 s
once built (the build is cached)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.testbed import hostpathplugin
from nodeagent.testbed.install import Progress


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    binary = hostpathplugin.build_binary(Progress(lambda _: None))
    endpoint = tmp_path / "dra.sock"
    endpoint.write_text("stale")  # a socket a killed instance left: removed
    port = _free_port()
    log = tmp_path / "proxy.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(binary), "--v=5", f"--endpoint={endpoint}", f"--proxy-endpoint=tcp://127.0.0.1:{port}"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 10
        while not endpoint.is_socket():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the proxy never listened"
            time.sleep(0.05)
        yield endpoint, port
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert not endpoint.exists()  # SIGTERM unlinks the socket


def test_each_unix_connection_is_paired_with_the_next_tcp_connection(proxy: tuple[Path, int]) -> None:
    endpoint, port = proxy
    for n in range(2):
        remote = socket.create_connection(("127.0.0.1", port), timeout=5)  # the e2e side's port-forward
        local = socket.socket(socket.AF_UNIX)  # the kubelet
        local.settimeout(5)
        local.connect(str(endpoint))
        local.sendall(f"hello {n}".encode())
        assert remote.recv(100) == f"hello {n}".encode()
        remote.sendall(b"answer")
        assert local.recv(100) == b"answer"
        remote.close()
        assert local.recv(100) == b""  # one side ends: the other is closed
        local.close()
