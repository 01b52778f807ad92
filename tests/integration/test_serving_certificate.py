"""serverTLSBootstrap: the agent asks the kubelet-serving signer for its serving certificate, serves with it once an
admin approves, and reuses it after a restart without asking again."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import (
    agent_config,
    clean_up,
    eventually,
    node_ready,
    start_agent,
    stop_agent,
)

CSRS = paths.api_path("certificatesigningrequests", group="certificates.k8s.io")


@pytest.fixture(scope="module")
def config(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # No tlsCertFile: the certificate must come from the cluster.
    path = Path(tmp_path_factory.mktemp("tlsboot")) / "agent.yaml"
    agent_config(testbed, path, serverTLSBootstrap=True, tlsCertFile="", tlsPrivateKeyFile="")
    return path


@pytest.fixture(scope="module")
def cleanup(testbed: Testbed, settings: Settings) -> Iterator[None]:
    yield
    asyncio.run(clean_up(testbed, settings))


async def _node_csrs(admin: KubeClient, node: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await admin.list(CSRS))["items"]
    return [
        c
        for c in items
        if c["spec"].get("signerName") == "kubernetes.io/kubelet-serving"
        and c["spec"].get("username") == f"system:node:{node}"
    ]


def _peer_certificate(testbed: Testbed, settings: Settings) -> x509.Certificate | None:
    context = ssl.create_default_context(cafile=str(testbed.layout.pki / "ca.crt"))
    context.check_hostname = False
    try:
        with (
            socket.create_connection((settings.node_ip, settings.kubelet_port), timeout=5) as raw,
            context.wrap_socket(raw) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError):
        return None
    return x509.load_der_x509_certificate(der) if der else None


async def test_bootstrap_approval_and_reuse(
    testbed: Testbed, settings: Settings, admin: KubeClient, config: Path, cleanup: None
) -> None:
    for old in await _node_csrs(admin, settings.node_name):
        await admin.delete(f"{CSRS}/{old['metadata']['name']}")
    pki_dir = testbed.layout.kubelet_root / "pki"
    for leftover in pki_dir.glob("kubelet-server-*") if pki_dir.exists() else ():
        leftover.unlink()
    agent = start_agent(testbed, testbed.layout.logs / "agent-tls-bootstrap.log", config=config)
    try:
        await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=agent)
        pending = await eventually(
            lambda: _node_csrs(admin, settings.node_name), timeout=30, what="a kubelet-serving CSR", agent=agent
        )
        assert len(pending) == 1
        csr = pending[0]
        assert csr["spec"]["usages"] == ["digital signature", "server auth"]
        # Not approved yet: nothing to serve with, the handshake fails.
        assert await asyncio.to_thread(_peer_certificate, testbed, settings) is None
        name = csr["metadata"]["name"]
        csr["status"] = {
            "conditions": [
                {"type": "Approved", "status": "True", "reason": "TestApproval", "message": "approved by the test"}
            ]
        }
        await admin.replace(f"{CSRS}/{name}/approval", csr)

        async def served() -> x509.Certificate | None:
            return await asyncio.to_thread(_peer_certificate, testbed, settings)

        cert = await eventually(served, timeout=60, what="the issued certificate served", agent=agent)
        common = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
        organizations = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
        assert (common, organizations) == ([f"system:node:{settings.node_name}"], ["system:nodes"])
        current = pki_dir / "kubelet-server-current.pem"
        assert current.is_symlink()
        assert x509.load_pem_x509_certificate(current.read_bytes()).serial_number == cert.serial_number
    finally:
        stop_agent(agent)
    # A restart reuses the valid certificate: served at once, no new request.
    agent = start_agent(testbed, testbed.layout.logs / "agent-tls-bootstrap.log", config=config)
    try:
        again = await eventually(served, timeout=60, what="the certificate served after restart", agent=agent)
        assert again.serial_number == cert.serial_number
        assert len(await _node_csrs(admin, settings.node_name)) == 1
    finally:
        stop_agent(agent)
