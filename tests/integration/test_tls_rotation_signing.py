"""Client certificate rotation with the controller-manager's real short signing duration, on a testbed of its own.

The shared testbed's csrsigning controller signs for a year, so test_tls_bootstrap.py forces its rotation deadline
with a test knob. Here the controller-manager runs with `--cluster-signing-duration=150s` (it only refuses a duration
that is not positive) and no knob is set: the deadline is the agent's own jittered 70-90% of the certificate's life.

What the signer makes of 150 s (pkg/controller/certificates/authority, PermissiveSigningPolicy with the signer's
Backdate 5 min and Short 8 h): notBefore = now - 5 min, notAfter = now + 150 s (a "short" certificate's end is not
backdated), so the life the agent sees is 450 s and its deadline falls 15-105 s after the issuance. Below about 130 s
(0.7 * (ttl + 300 s) < 300 s) a deadline could fall before the issuance and every certificate would be renewed at
once, by the upstream kubelet as well; 150 s keeps one rotation within CI's patience.

Second, a certificate that expires while the apiserver is away: the testbed's own apiserver is stopped (by the PID
the testbed recorded) until the node's certificate has expired, then started again; as upstream's certificate manager
(its clientsetFn falls back to the bootstrap client once the current certificate has expired) the agent asks with
the bootstrap kubeconfig and the node is Ready again, without a restart.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import os
import re
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from cryptography import x509

from nodeagent.certificate.rotation import ROTATION_ENV
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import ApiUnavailable, NotFound
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
from tests.integration.test_tls_bootstrap import (
    CSRS,
    KUBEADM_BINDINGS,
    SIGNER,
    bootstrap_kubeconfig,
    bootstrap_token,
)

SIGNING_DURATION = datetime.timedelta(seconds=150)
# The signer's backdate (pkg/controller/certificates/signer: Backdate 5 min): notBefore is this far before issuance.
BACKDATE = datetime.timedelta(minutes=5)
PODS_LIST = "list synced path=/api/v1/pods"
DEADLINE = re.compile(r"client certificate rotation scheduled deadline=(\S+)")


@dataclass
class Node:
    bed: Testbed
    settings: Settings
    admin: KubeClient
    agent: Agent
    token: str
    cert_dir: Path

    @property
    def current(self) -> Path:
        return self.cert_dir / "kubelet-client-current.pem"

    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.current.read_bytes())

    def log(self) -> str:
        return self.agent.log.read_text()


@pytest.fixture(scope="module")
def bed() -> Iterator[Testbed]:
    """A testbed of this module's own: its controller-manager signs every CSR for 150 s, which no other test wants."""
    root = Path(tempfile.mkdtemp(prefix="nodeagent-signing-", dir=os.environ.get("NODEAGENT_TEST_DIR")))
    testbed = Testbed(root, cluster_signing_duration=f"{SIGNING_DURATION.total_seconds():.0f}s")
    try:
        asyncio.run(testbed.up())
    except Exception as exc:
        asyncio.run(testbed.down())
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"the short-signing testbed did not come up: {exc}", pytrace=False)
    try:
        yield testbed
    finally:
        asyncio.run(testbed.down())
        if not os.environ.get("NODEAGENT_KEEP_TESTBED"):
            shutil.rmtree(root, ignore_errors=True)


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def node(bed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Node]:
    """An agent with only a bootstrap token and `rotateCertificates: true`, no test knob, Ready on `bed`."""
    assert ROTATION_ENV not in os.environ  # the deadline must be the agent's own
    work = tmp_path_factory.mktemp("signing")
    settings = bed.settings
    async with (
        KubeClient.from_kubeconfig(bed.layout.admin_kubeconfig) as admin,
        bootstrap_token(admin, expires_in=datetime.timedelta(hours=1), bindings=KUBEADM_BINDINGS) as token,
    ):
        boot = bootstrap_kubeconfig(work / "bootstrap-kubelet.conf", bed, settings, token)
        config = agent_config(bed, work / "agent.yaml", rotateCertificates=True)
        cert_dir = work / "pki"
        agent = start_agent(
            bed,
            bed.layout.logs / "agent-tls-signing.log",
            config=config,
            args=("--kubeconfig", str(work / "kubelet.conf"), "--bootstrap-kubeconfig", str(boot),
                  "--cert-dir", str(cert_dir), "--node-name", settings.node_name),
        )  # fmt: skip
        try:
            await eventually(lambda: node_ready(admin, settings.node_name), timeout=90, what="node Ready", agent=agent)
            yield Node(bed, settings, admin, agent, token, cert_dir)
        finally:
            stop_agent(agent)
            await clean_up(bed, settings)


async def _csr_issuing(admin: KubeClient, serial: int) -> dict[str, Any]:
    """The client CSR whose certificate has `serial`."""
    for csr in (await admin.list(CSRS))["items"]:
        encoded = (csr.get("status") or {}).get("certificate")
        if csr["spec"].get("signerName") != SIGNER or not encoded:
            continue
        if x509.load_pem_x509_certificate(base64.b64decode(encoded)).serial_number == serial:
            return dict(csr)
    raise AssertionError(f"no client CSR issued the certificate with serial {serial:x}")


def _issued_at(cert: x509.Certificate) -> datetime.datetime:
    return cert.not_valid_before_utc + BACKDATE


async def test_real_rotation_at_70_to_90_percent_resumes_the_pods_watch(node: Node) -> None:
    admin, name = node.admin, node.settings.node_name
    first_path = node.current.resolve()
    first = node.certificate()
    # The duration reaches the certificate: 150 s after the issuance, backdated 5 min (a year without the flag).
    life = first.not_valid_after_utc - first.not_valid_before_utc
    assert life == SIGNING_DURATION + BACKDATE, (first.not_valid_before_utc, first.not_valid_after_utc)
    bootstrap_csr = await _csr_issuing(admin, first.serial_number)
    assert bootstrap_csr["spec"]["username"] == f"system:bootstrap:{node.token.partition('.')[0]}"

    async def rotated() -> bool:
        return "client certificate rotated" in node.log()

    # The latest deadline is 90% of the life: 105 s after the issuance.
    await eventually(rotated, timeout=150, what="a rotation", agent=node.agent)
    seen = datetime.datetime.now(datetime.UTC)
    second_path = node.current.resolve()
    second = node.certificate()
    assert second_path != first_path and second_path.name.startswith("kubelet-client-20")
    assert stat.S_IMODE(second_path.stat().st_mode) == 0o600
    assert second.serial_number != first.serial_number
    assert second.not_valid_after_utc - second.not_valid_before_utc == SIGNING_DURATION + BACKDATE

    # The deadline the agent scheduled for the first certificate, and when the second was really issued: both
    # between 70% and 90% of the first one's life (the signer's clock is the same as ours: one machine).
    deadlines = DEADLINE.findall(node.log())
    assert deadlines, node.log()
    deadline = datetime.datetime.fromisoformat(deadlines[0])
    start = first.not_valid_before_utc
    assert start + 0.7 * life <= deadline <= start + 0.9 * life, (deadline, start, life)
    issued = _issued_at(second)
    assert (
        start + 0.7 * life - datetime.timedelta(seconds=1)
        <= issued
        <= start + 0.9 * life + datetime.timedelta(seconds=10)
    ), (issued, deadline)
    assert issued < first.not_valid_after_utc  # renewed before the old one expired
    print(
        f"rotation: first issued {_issued_at(first).isoformat()}, deadline {deadline.isoformat()} "
        f"({(deadline - start) / life:.0%} of {life.total_seconds():.0f}s), second issued {issued.isoformat()}, "
        f"seen {seen.isoformat()}"
    )

    # The renewal is the node's own request (selfnodeclient), approved by the controller-manager.
    csr = await _csr_issuing(admin, second.serial_number)
    assert csr["spec"]["username"] == f"system:node:{name}", csr["spec"]
    assert "system:nodes" in csr["spec"]["groups"]
    approved = [c for c in csr["status"]["conditions"] if c["type"] == "Approved"]
    assert approved and approved[0]["reason"] == "AutoApproved"

    # As upstream's kubelet, the rotation closed every connection made with the old certificate, the pods watch's
    # among them; the watch went on from its resourceVersion: a pod made now runs, and the pods were never relisted.
    assert "closing connections to use it" in node.log()
    pod = "after-real-rotation"
    await admin.create(
        paths.pods(NS),
        one_container_pod(
            pod, {"image": configs.busybox_image(node.settings), "command": ["sleep", "3600"]}, {"app": pod},
            nodeName=name,
        ),
    )  # fmt: skip
    try:
        await wait_running(admin, node.agent, pod, "main")
        text = node.log()
        assert len([line for line in text.splitlines() if PODS_LIST in line]) == 1
        assert node.agent.proc.poll() is None  # no restart
        assert await node_ready(admin, name)
    finally:
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, pod), grace_period_seconds=0)


# Time the apiserver's stop may take (SIGTERM, its grace, SIGKILL on a loaded machine) during which a rotation that
# falls due still reaches it as the node's own CSR; the outage must start clear of the next deadline.
STOP_MARGIN = datetime.timedelta(seconds=45)


async def _clear_of_the_next_rotation(node: Node) -> None:
    """Wait until the agent's latest scheduled rotation deadline is at least STOP_MARGIN away, letting rotations that
    fall due sooner happen first (each new certificate's deadline is 15-105 s after its issuance). Otherwise a CSR
    the agent sends with its own identity while the apiserver is stopping is signed after the outage, and the
    bootstrap fallback this test is about never comes into play (seen once under load: a node-identity CSR)."""
    for _ in range(20):
        deadlines = DEADLINE.findall(node.log())
        assert deadlines, node.log()
        deadline = datetime.datetime.fromisoformat(deadlines[-1])
        if deadline - datetime.datetime.now(datetime.UTC) >= STOP_MARGIN:
            return
        count = len(deadlines)

        async def rescheduled(count: int = count) -> bool:
            return len(DEADLINE.findall(node.log())) > count

        await eventually(rescheduled, timeout=240, what="the next rotation scheduled", agent=node.agent)
    raise AssertionError("no rotation deadline far enough ahead in 20 rotations")


async def test_certificate_expired_while_the_apiserver_was_away_is_renewed(node: Node) -> None:
    admin, name = node.admin, node.settings.node_name
    await _clear_of_the_next_rotation(node)
    await node.bed.stop_apiserver()
    await asyncio.sleep(1)  # a response on its way when the apiserver stopped has been stored by now
    stopped = node.certificate()
    expiry = stopped.not_valid_after_utc
    try:
        wait = (expiry - datetime.datetime.now(datetime.UTC)).total_seconds() + 3
        print(f"apiserver stopped; the client certificate expires in {wait - 3:.0f}s")
        await asyncio.sleep(max(wait, 0))
        assert node.agent.proc.poll() is None, node.agent.tail()
        assert node.certificate().serial_number == stopped.serial_number  # nothing could renew it meanwhile
    finally:
        await node.bed.start_apiserver()
    back = datetime.datetime.now(datetime.UTC)

    async def renewed() -> bool:
        cert = node.certificate()
        if cert.serial_number == stopped.serial_number:
            return False
        try:
            lease = await admin.get(paths.lease("kube-node-lease", name))
            ready = await node_ready(admin, name)
        except ApiUnavailable:
            return False
        renew = datetime.datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))
        # A heartbeat after the apiserver came back: the agent authenticates again, not a stale Ready.
        return renew > back and ready

    # The agent retries every 32 s at most (as upstream's certificate manager); most of the wait is the
    # controller-manager's: its informers come back from the outage before it approves and signs (74 s in one run).
    await eventually(renewed, timeout=180, what="renewed certificate and node Ready", agent=node.agent)
    took = datetime.datetime.now(datetime.UTC) - back
    renewed_cert = node.certificate()
    assert renewed_cert.not_valid_before_utc + BACKDATE >= back - datetime.timedelta(seconds=1)
    # As upstream: with the node's own certificate expired, the request goes out with the bootstrap credential.
    csr = await _csr_issuing(admin, renewed_cert.serial_number)
    assert csr["spec"]["username"] == f"system:bootstrap:{node.token.partition('.')[0]}", csr["spec"]
    assert "client certificate expired, requesting with the bootstrap kubeconfig" in node.log()
    assert node.agent.proc.poll() is None  # renewed in place, no restart
    print(f"renewed and Ready {took.total_seconds():.0f}s after the apiserver came back")
