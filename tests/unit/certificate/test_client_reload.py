"""KubeClient.reload_client_certificate and close_connections against a real TLS server on loopback that requires
client certificates: as upstream's kubelet at a rotation, every connection made with the old pair is closed, the idle
one and the one waiting for its answer (a watch), and the next request handshakes with the new pair."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import ApiUnavailable
from nodeagent.kube.kubeconfig import ClusterCredentials
from tests.unit.certificate.certs import ca, client_pair, server_pair

AUTHORITY = ca()


async def test_a_rotation_closes_every_connection_of_the_old_pair(tmp_path: Path) -> None:
    ca_pem = AUTHORITY[1].public_bytes(serialization.Encoding.PEM)
    server_cert, server_key = server_pair(AUTHORITY, "127.0.0.1")
    (tmp_path / "server.pem").write_bytes(server_cert + server_key)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=ca_pem.decode())
    server_tls.load_cert_chain(tmp_path / "server.pem")
    server_tls.verify_mode = ssl.CERT_REQUIRED
    seen: list[tuple[int, int]] = []  # (connection number, client certificate serial) per request
    connections = 0
    release, first_arrived = asyncio.Event(), asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        number = connections
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        serial = x509.load_der_x509_certificate(der).serial_number
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                seen.append((number, serial))
                if len(seen) == 1:
                    first_arrived.set()
                    await release.wait()  # the first request waits for its answer, as a watch does
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_tls)
    port = server.sockets[0].getsockname()[1]
    now = datetime.datetime.now(datetime.UTC)
    first_cert, first_key = client_pair(
        AUTHORITY, "n1", now - datetime.timedelta(hours=1), now + datetime.timedelta(days=1)
    )
    second_cert, second_key = client_pair(AUTHORITY, "n1", now, now + datetime.timedelta(days=2))
    first_serial = x509.load_pem_x509_certificate(first_cert).serial_number
    second_serial = x509.load_pem_x509_certificate(second_cert).serial_number
    (tmp_path / "pair.pem").write_bytes(second_cert + second_key)
    credentials = ClusterCredentials(
        server=f"https://127.0.0.1:{port}", ca_pem=ca_pem, client_cert_pem=first_cert, client_key_pem=first_key
    )
    try:
        async with KubeClient(credentials) as client:
            held = asyncio.create_task(client.get("/api/v1/namespaces/default"))  # connection 1, in use
            await asyncio.wait_for(first_arrived.wait(), 10)
            await client.get("/api/v1/namespaces/default")  # connection 2, then idle and kept
            client.reload_client_certificate(tmp_path / "pair.pem")
            await client.close_connections()
            with pytest.raises(ApiUnavailable):
                await asyncio.wait_for(held, 10)  # cut: its caller retries, as after a dropped connection
            await client.get("/api/v1/namespaces/default")  # not on connection 2: a new handshake
    finally:
        release.set()
        server.close()
        await server.wait_closed()
    assert seen == [(1, first_serial), (2, first_serial), (3, second_serial)]
