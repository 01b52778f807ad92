"""TLS bootstrap on the real control plane: a node that has only a bootstrap token gets its client certificate
through a CSR that the controller-manager's csrapproving controller approves and csrsigning issues, registers its
Node with it, and reuses it after a restart. The first start goes through the `kubelet` entry point with the flags
kubeadm's drop-in passes, so the kubelet command line (labels and taints at registration) is exercised too.

The token and RBAC are made here as kubeadm makes them (a `bootstrap-token-<id>` Secret in kube-system; the
bootstrappers' group bound to system:node-bootstrapper and to the nodeclient auto-approval role; system:nodes to the
selfnodeclient one) and removed after, with the CSRs the test caused."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import os
import secrets
import stat
import string
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from nodeagent.certificate.rotation import ROTATION_ENV
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import (
    NS,
    Agent,
    agent_config,
    clean_up,
    eventually,
    node_ready,
    one_container_pod,
    start_agent,
    stop_agent,
    wait_running,
)

CSRS = paths.api_path("certificatesigningrequests", group="certificates.k8s.io")
SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
BINDINGS = paths.api_path("clusterrolebindings", group="rbac.authorization.k8s.io")
TOKEN_GROUP = "system:bootstrappers:kubeadm:default-node-token"
# As kubeadm's bootstrap-token phase binds them.
KUBEADM_BINDINGS = (
    ("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", TOKEN_GROUP),
    ("kubeadm:node-autoapprove-bootstrap",
     "system:certificates.k8s.io:certificatesigningrequests:nodeclient", TOKEN_GROUP),
    ("kubeadm:node-autoapprove-certificate-rotation",
     "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"),
)  # fmt: skip


def _token_part(length: int) -> str:
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(length))


@contextlib.asynccontextmanager
async def bootstrap_token(
    admin: KubeClient, *, expires_in: datetime.timedelta, bindings: tuple[tuple[str, str, str], ...]
) -> AsyncIterator[str]:
    """A bootstrap token `<id>.<secret>`, as `kubeadm token create` makes one, with `bindings`; all removed after,
    with the client CSRs made meanwhile."""
    token_id, token_secret = _token_part(6), _token_part(16)
    expiration = (datetime.datetime.now(datetime.UTC) + expires_in).strftime("%Y-%m-%dT%H:%M:%SZ")
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"bootstrap-token-{token_id}", "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "token-id": token_id,
            "token-secret": token_secret,
            "expiration": expiration,
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
            "auth-extra-groups": TOKEN_GROUP,
        },
    }
    made: list[str] = []
    try:
        await admin.create(paths.api_path("secrets", namespace="kube-system"), secret)
        for name, role, group in bindings:
            binding = {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
            }
            await admin.create(BINDINGS, binding)
            made.append(name)
        yield f"{token_id}.{token_secret}"
    finally:
        for name in made:
            with contextlib.suppress(NotFound):
                await admin.delete(f"{BINDINGS}/{name}")
        with contextlib.suppress(NotFound):
            await admin.delete(paths.api_path("secrets", namespace="kube-system", name=f"bootstrap-token-{token_id}"))
        for csr in await _client_csrs(admin):
            with contextlib.suppress(NotFound):
                await admin.delete(f"{CSRS}/{csr['metadata']['name']}")


@pytest_asyncio.fixture(loop_scope="session")
async def token(admin: KubeClient) -> AsyncIterator[str]:
    """A valid token with kubeadm's bindings: its CSRs are approved by the controller-manager."""
    async with bootstrap_token(admin, expires_in=datetime.timedelta(hours=1), bindings=KUBEADM_BINDINGS) as value:
        yield value


@pytest.fixture
def node_dir(tmp_path: Path, testbed: Testbed, settings: Settings) -> Iterator[Path]:
    yield tmp_path
    asyncio.run(clean_up(testbed, settings))


def bootstrap_kubeconfig(path: Path, testbed: Testbed, settings: Settings, token: str) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "testbed",
                "cluster": {
                    "server": settings.apiserver_url,
                    "certificate-authority": str(testbed.layout.pki / "ca.crt"),
                },
            }
        ],
        "users": [{"name": "tls-bootstrap-token-user", "user": {"token": token}}],
        "contexts": [{"name": "bootstrap", "context": {"cluster": "testbed", "user": "tls-bootstrap-token-user"}}],
        "current-context": "bootstrap",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


async def _client_csrs(admin: KubeClient) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await admin.list(CSRS))["items"]
    return [c for c in items if c["spec"].get("signerName") == SIGNER]


def start_kubelet(log: Path, argv: list[str]) -> Agent:
    """The `kubelet` console script's entry point, as a subprocess (the same function the script calls)."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from nodeagent.kubeletflags import main; sys.exit(main())", *argv],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=dict(os.environ),
        )  # fmt: skip
    return Agent(proc, log)


async def test_bootstrap_token_to_node_certificate_and_reuse(
    testbed: Testbed, settings: Settings, admin: KubeClient, token: str, node_dir: Path
) -> None:
    node = settings.node_name
    kubeconfig = node_dir / "kubelet.conf"
    cert_dir = node_dir / "pki"
    boot = bootstrap_kubeconfig(node_dir / "bootstrap-kubelet.conf", testbed, settings, token)
    log = testbed.layout.logs / "agent-tls-bootstrap-client.log"
    with contextlib.suppress(NotFound):
        await admin.delete(paths.node(node))
    assert await _client_csrs(admin) == []
    agent = start_kubelet(
        log,
        [
            f"--bootstrap-kubeconfig={boot}",
            f"--kubeconfig={kubeconfig}",
            f"--config={testbed.layout.agent_config}",
            f"--cert-dir={cert_dir}",
            "--root-dir", str(testbed.layout.kubelet_root),
            f"--node-ip={settings.node_ip}",
            f"--hostname-override={node}",
            "--node-labels=example.com/pool=bootstrap,node.kubernetes.io/exclude-from-external-load-balancers=true",
            "--register-with-taints=example.com/dedicated=tls:NoSchedule",
            "--v=2",
        ],
    )  # fmt: skip
    try:
        await eventually(lambda: node_ready(admin, node), timeout=90, what="node Ready", agent=agent)
        csrs = await _client_csrs(admin)
        assert len(csrs) == 1, csrs
        csr = csrs[0]
        assert csr["metadata"]["name"].startswith("node-csr-")
        assert csr["spec"]["username"] == f"system:bootstrap:{token.partition('.')[0]}"
        assert TOKEN_GROUP in csr["spec"]["groups"]
        assert csr["spec"]["usages"] == ["digital signature", "client auth"]
        approved = [c for c in csr["status"]["conditions"] if c["type"] == "Approved"]
        # Approved by the controller-manager, not by anyone here.
        assert approved and approved[0]["reason"] == "AutoApproved", csr["status"]
        issued = x509.load_pem_x509_certificate(base64.b64decode(csr["status"]["certificate"]))

        current = cert_dir / "kubelet-client-current.pem"
        assert current.is_symlink()
        dated = current.resolve()
        assert dated.parent == cert_dir.resolve()
        assert dated.name.startswith("kubelet-client-20") and dated.suffix == ".pem"
        assert stat.S_IMODE(dated.stat().st_mode) == 0o600
        assert not (cert_dir / "kubelet-client.key.tmp").exists()
        pem = dated.read_bytes()
        assert b"PRIVATE KEY" in pem
        cert = x509.load_pem_x509_certificate(pem)
        assert cert.serial_number == issued.serial_number
        assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)] == [f"system:node:{node}"]
        assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:nodes"]
        assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
        written = yaml.safe_load(kubeconfig.read_text())
        assert written["users"][0]["user"] == {"client-certificate": str(current), "client-key": str(current)}

        node_obj = await admin.get(paths.node(node))
        labels = node_obj["metadata"]["labels"]
        assert labels["example.com/pool"] == "bootstrap"
        assert labels["node.kubernetes.io/exclude-from-external-load-balancers"] == "true"
        taints = [t for t in node_obj["spec"].get("taints") or [] if t["key"] == "example.com/dedicated"]
        assert taints == [{"key": "example.com/dedicated", "value": "tls", "effect": "NoSchedule"}]
    finally:
        stop_agent(agent)
    assert agent.proc.returncode == 0, agent.tail()

    # A restart (here through `nodeagent run`) finds a valid kubeconfig: no new request, the same certificate.
    agent = start_agent(
        testbed,
        log,
        args=("--kubeconfig", str(kubeconfig), "--bootstrap-kubeconfig", str(boot), "--cert-dir", str(cert_dir),
              "--node-name", node),
    )  # fmt: skip
    try:
        started = datetime.datetime.now(datetime.UTC)

        async def renewed_after_restart() -> bool:
            try:
                lease = await admin.get(paths.lease("kube-node-lease", node))
            except NotFound:  # the first run may stop before its first renewal
                return False
            renew = datetime.datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))
            return renew > started and await node_ready(admin, node)

        await eventually(renewed_after_restart, timeout=60, what="lease renewed after restart", agent=agent)
        assert len(await _client_csrs(admin)) == 1
        assert current.resolve() == dated
        assert "kubeconfig exists and is valid, skipping bootstrap" in log.read_text()
    finally:
        stop_agent(agent)


async def test_rotation_without_restart_resumes_the_pods_watch(
    testbed: Testbed, settings: Settings, admin: KubeClient, token: str, node_dir: Path
) -> None:
    """rotateCertificates: a new CSR with the node's own identity (approved through selfnodeclient), a new pair and
    symlink, the client on the new certificate (every connection of the old one closed, as upstream's kubelet), and
    the pods watch resumed from its resourceVersion, never relisted. The deadline is forced to a few
    seconds by the test knob (see nodeagent.certificate.rotation); the real one is 70-90% of a year here."""
    node = settings.node_name
    kubeconfig, cert_dir = node_dir / "kubelet.conf", node_dir / "pki"
    boot = bootstrap_kubeconfig(node_dir / "bootstrap-kubelet.conf", testbed, settings, token)
    config = agent_config(testbed, node_dir / "agent.yaml", rotateCertificates=True)
    log = testbed.layout.logs / "agent-tls-rotation.log"
    for old in await _client_csrs(admin):
        await admin.delete(f"{CSRS}/{old['metadata']['name']}")
    with contextlib.suppress(NotFound):
        await admin.delete(paths.node(node))
    agent = start_agent(
        testbed,
        log,
        config=config,
        args=("--kubeconfig", str(kubeconfig), "--bootstrap-kubeconfig", str(boot), "--cert-dir", str(cert_dir),
              "--node-name", node),
        env={ROTATION_ENV: "6"},
    )  # fmt: skip
    current = cert_dir / "kubelet-client-current.pem"
    try:
        await eventually(lambda: node_ready(admin, node), timeout=90, what="node Ready", agent=agent)
        first = current.resolve()

        async def rotated_twice() -> bool:
            return log.read_text().count("client certificate rotated") >= 2

        await eventually(rotated_twice, timeout=60, what="two rotations", agent=agent)
        newest = current.resolve()  # before the CSRs are listed: its request is among them
        by_node = [c for c in await _client_csrs(admin) if c["spec"]["username"] == f"system:node:{node}"]
        # Each rotation's request is the node's own (selfnodeclient); a third may be pending already.
        issued_by_node = [c for c in by_node if (c.get("status") or {}).get("certificate")]
        assert len(issued_by_node) >= 2, by_node
        by_node = issued_by_node
        for csr in by_node:
            approved = [c for c in csr["status"]["conditions"] if c["type"] == "Approved"]
            assert approved and approved[0]["reason"] == "AutoApproved"
            assert "system:nodes" in csr["spec"]["groups"]
        assert newest != first and newest.name.startswith("kubelet-client-")
        assert stat.S_IMODE(newest.stat().st_mode) == 0o600
        issued = {x509.load_pem_x509_certificate(base64.b64decode(c["status"]["certificate"])).serial_number
                  for c in by_node}  # fmt: skip
        assert x509.load_pem_x509_certificate(newest.read_bytes()).serial_number in issued

        # The pods watch, closed with the old certificate's connections, went on from its resourceVersion: a pod
        # made now runs, and the pods were never relisted.
        name = "after-rotation"
        await admin.create(
            paths.pods(NS),
            one_container_pod(
                name,
                {"image": configs.busybox_image(settings), "command": ["sleep", "3600"]},
                {"app": name},
                nodeName=node,
            ),
        )
        await wait_running(admin, agent, name, "main")
        text = log.read_text()
        assert text.count("client certificate rotated") >= 2
        pods_lists = [line for line in text.splitlines() if "list synced path=/api/v1/pods" in line]
        assert len(pods_lists) == 1, pods_lists
        assert text.count("closing connections to use it") >= 2
        assert await node_ready(admin, node)
    finally:
        stop_agent(agent)


async def test_denied_request_is_logged_and_retried_with_backoff(
    testbed: Testbed, settings: Settings, admin: KubeClient, node_dir: Path
) -> None:
    """Without the auto-approval binding the request waits; denied by an admin, it is logged with the reason and a
    new one (a new key, so a new name) follows after a backoff, not in a tight loop; approved, the node joins."""
    node = settings.node_name
    kubeconfig, cert_dir = node_dir / "kubelet.conf", node_dir / "pki"
    log = testbed.layout.logs / "agent-tls-denied.log"
    with contextlib.suppress(NotFound):
        await admin.delete(paths.node(node))
    async with bootstrap_token(admin, expires_in=datetime.timedelta(hours=1), bindings=KUBEADM_BINDINGS[:1]) as tok:
        boot = bootstrap_kubeconfig(node_dir / "bootstrap-kubelet.conf", testbed, settings, tok)
        agent = start_agent(
            testbed,
            log,
            args=("--kubeconfig", str(kubeconfig), "--bootstrap-kubeconfig", str(boot), "--cert-dir", str(cert_dir),
                  "--node-name", node),
        )  # fmt: skip
        try:
            first = (await eventually(lambda: _client_csrs(admin), timeout=60, what="a CSR", agent=agent))[0]
            await asyncio.sleep(2)
            assert not (first.get("status") or {}).get("conditions")  # nobody approves it: RBAC does not allow
            await _decide(admin, first, "Denied", "TestDenied", "denied by the test")
            denied_at = datetime.datetime.now(datetime.UTC)

            async def second_request() -> list[dict[str, Any]]:
                return [c for c in await _client_csrs(admin) if c["metadata"]["name"] != first["metadata"]["name"]]

            second = (await eventually(second_request, timeout=30, what="a new CSR", agent=agent))[0]
            created = datetime.datetime.fromisoformat(second["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
            # The backoff starts at 2 s (creationTimestamp has whole seconds).
            assert (created - denied_at).total_seconds() >= 1, (created, denied_at)
            assert "certificate signing request is denied, reason: TestDenied, message: denied by the test" in (
                log.read_text()
            )
            await asyncio.sleep(3)
            assert len(await _client_csrs(admin)) == 2  # still waiting on the second: no loop of requests
            assert not (cert_dir / "kubelet-client-current.pem").exists()
            await _decide(admin, second, "Approved", "TestApproved", "approved by the test")
            await eventually(lambda: node_ready(admin, node), timeout=60, what="node Ready", agent=agent)
            assert (cert_dir / "kubelet-client-current.pem").is_symlink()
        finally:
            stop_agent(agent)


async def test_expired_token_is_a_clear_error(
    testbed: Testbed, settings: Settings, admin: KubeClient, node_dir: Path
) -> None:
    node = settings.node_name
    log = testbed.layout.logs / "agent-tls-expired.log"
    async with bootstrap_token(admin, expires_in=-datetime.timedelta(minutes=5), bindings=KUBEADM_BINDINGS) as tok:
        boot = bootstrap_kubeconfig(node_dir / "bootstrap-kubelet.conf", testbed, settings, tok)
        agent = start_agent(
            testbed,
            log,
            args=("--kubeconfig", str(node_dir / "kubelet.conf"), "--bootstrap-kubeconfig", str(boot),
                  "--cert-dir", str(node_dir / "pki"), "--node-name", node),
        )  # fmt: skip
        try:

            async def refused() -> bool:
                return "an expired or unknown bootstrap token?" in log.read_text()

            await eventually(refused, timeout=60, what="the refused token logged", agent=agent)
            assert "401" in log.read_text()
            assert await _client_csrs(admin) == []
            assert not (node_dir / "kubelet.conf").exists()
        finally:
            stop_agent(agent)


async def _decide(admin: KubeClient, csr: dict[str, Any], kind: str, reason: str, message: str) -> None:
    name = csr["metadata"]["name"]
    fresh = await admin.get(f"{CSRS}/{name}")
    fresh["status"] = {"conditions": [{"type": kind, "status": "True", "reason": reason, "message": message}]}
    await admin.replace(f"{CSRS}/{name}/approval", fresh)
