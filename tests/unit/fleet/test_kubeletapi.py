"""The fleet's kubelet API: one port, a socket per node address, each request answered by the node whose address it
came in on, with that node's own content and authorization; over real loopback sockets (127.0.0.1 and 127.0.0.2)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from nodeagent.fleet.kubeletapi import KubeletRouter, fleet_tls, listen
from nodeagent.fleet.plan import FleetError
from nodeagent.server.auth import Authenticator, Authorizer
from nodeagent.server.server import KubeletServer
from tests.unit.server.test_server import Host, Runtime, pod

ADDRESSES = ("127.0.0.1", "127.0.0.2")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def node_server(name: str, tmp_path: Path) -> KubeletServer:
    host = Host(tmp_path / f"{name}.log")
    host.pod = pod(name=f"web-{name}", uid=f"uid-{name}")

    async def review(token: str) -> Mapping[str, Any]:
        return {"authenticated": True, "user": {"username": token}}

    async def access(spec: Mapping[str, Any]) -> Mapping[str, Any]:
        # The SubjectAccessReview names the node that asks: bob may reach node-a only.
        return {"allowed": spec["user"] == "admin" or spec["resourceAttributes"]["name"] == "node-a"}

    return KubeletServer(
        host,
        Runtime("http://127.0.0.1:1/", tmp_path / f"{name}.log"),
        node_name=name,
        authenticator=Authenticator(token_review=review),
        authorizer=Authorizer(access_review=access),
    )


async def fetch(address: str, port: int, path: str, token: str) -> tuple[int, bytes]:
    client = ssl.create_default_context()
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    reader, writer = await asyncio.open_connection(address, port, ssl=client)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {address}:{port}\r\nAuthorization: Bearer {token}\r\n".encode())
    writer.write(b"Connection: close\r\n\r\n")
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


async def test_each_address_reaches_its_own_node(tmp_path: Path) -> None:
    router = KubeletRouter()
    tls = fleet_tls(tmp_path / "tls", ADDRESSES, cert_file=None, key_file=None, client_ca_file="")
    port = free_port()
    http = await listen(router, tls, ADDRESSES, port)
    try:
        router.route("127.0.0.1", node_server("node-a", tmp_path).handle)
        unroute_b = router.route("127.0.0.2", node_server("node-b", tmp_path).handle)

        status_a, body_a = await fetch("127.0.0.1", port, "/pods", "admin")
        status_b, body_b = await fetch("127.0.0.2", port, "/pods", "admin")
        assert status_a == status_b == 200
        assert b"web-node-a" in body_a and b"web-node-b" not in body_a
        assert b"web-node-b" in body_b and b"web-node-a" not in body_b

        # Authorization is the node's own: its name is the SubjectAccessReview's.
        assert (await fetch("127.0.0.1", port, "/healthz", "bob"))[0] == 200
        status, body = await fetch("127.0.0.2", port, "/healthz", "bob")
        assert status == 403 and b"Forbidden (user=bob" in body

        unroute_b()
        assert await fetch("127.0.0.2", port, "/healthz", "admin") == (503, b"no emulated node serves 127.0.0.2 now\n")
        assert (await fetch("127.0.0.1", port, "/healthz", "admin"))[0] == 200
    finally:
        await http.close()


def test_the_self_signed_certificate_holds_every_node_address(tmp_path: Path) -> None:
    fleet_tls(tmp_path, ADDRESSES, cert_file=None, key_file=None, client_ca_file="")
    (cert_path,) = tmp_path.glob("*/kubelet.crt")
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.IPAddress)) >= {ipaddress.ip_address(a) for a in ADDRESSES}
    # Another set of nodes gets a certificate of its own, not the first one's.
    fleet_tls(tmp_path, ("127.0.0.3",), cert_file=None, key_file=None, client_ca_file="")
    assert len(list(tmp_path.glob("*/kubelet.crt"))) == 2


def test_one_address_is_one_node() -> None:
    router = KubeletRouter()

    async def handler(request: Any, responder: Any) -> None:
        return None

    unroute = router.route("127.0.0.1", handler)
    with pytest.raises(FleetError, match="two nodes"):
        router.route("127.0.0.1", handler)
    unroute()
    assert router.routed == 0


async def test_an_address_not_local_is_a_clear_error(tmp_path: Path) -> None:
    tls = fleet_tls(tmp_path, ("198.18.255.254",), cert_file=None, key_file=None, client_ca_file="")
    with pytest.raises(FleetError, match="ip route add local"):
        await listen(KubeletRouter(), tls, ("198.18.255.254",), free_port())
