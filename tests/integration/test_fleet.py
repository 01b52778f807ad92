"""`nodeagent fleet` on the testbed: 10 emulated nodes, each with its own client certificate from TLS bootstrap,
register, become Ready and renew their leases; NodeRestriction holds between them; a Deployment of 30 pods is
scheduled onto them, reaches Running with addresses from the fleet's pod network, and is deleted cleanly. Every
node's kubelet API is served on the fleet's one port: the apiserver's node proxy reaches two nodes, each with its own
answers (its node addresses made local to the machine by a `local` route on lo for the test).

The fleet runs as `python -m nodeagent fleet` in a process of its own, stopped by SIGTERM at the end (exit 0: no
node failed). About 15 s on a quiet 2-core machine, most of it waiting for the first lease renewal (10 s); 40 s at a
load average of 60, 113 s at 270. The kubelet API check took 3.4 s of a 46 s run at load average 39."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import json
import random
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from nodeagent.fleet.plan import DEFAULT_POD_NETWORK, FLEET_LABEL, FleetOptions
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import Forbidden, NotFound
from nodeagent.testbed.kubectl import kubectl
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.pki import CertificateAuthority
from nodeagent.testbed.testbed import Testbed
from tests.integration.test_tls_bootstrap import KUBEADM_BINDINGS, bootstrap_kubeconfig, bootstrap_token

NODES = 10
PODS = 30
NS = "default"
DEPLOYMENTS = paths.api_path("deployments", group="apps", namespace=NS)


async def until(check: Callable[[], Awaitable[Any]], *, timeout: float, what: str) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Any = None
    while loop.time() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.5)
    raise AssertionError(f"{what}: not true after {timeout:.0f}s (last={last!r})")


def spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


@contextlib.asynccontextmanager
async def running_fleet(options: FleetOptions, admin: KubeClient, log: Path) -> AsyncIterator[subprocess.Popen[bytes]]:
    assert options.bootstrap_kubeconfig is not None
    argv = [
        sys.executable, "-m", "nodeagent", "fleet", "--nodes", str(options.nodes), "--prefix", options.prefix,
        "--bootstrap-kubeconfig", str(options.bootstrap_kubeconfig), "--dir", str(options.directory),
        "--node-network", options.node_network, "--kubelet-port", str(options.kubelet_port),
        "--tls-cert-file", str(options.tls_cert_file), "--tls-private-key-file", str(options.tls_private_key_file),
        "--client-ca-file", str(options.client_ca_file),
    ]  # fmt: skip
    fleet = spawn(argv, log)
    try:
        yield fleet
    finally:
        if fleet.poll() is None:
            fleet.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(fleet.wait, 60)
        except subprocess.TimeoutExpired:
            fleet.kill()
            fleet.wait()
        for ordinal in range(options.nodes):
            with contextlib.suppress(NotFound):
                await admin.delete(paths.node(f"{options.prefix}-{ordinal}"))
            with contextlib.suppress(NotFound):
                await admin.delete(paths.lease("kube-node-lease", f"{options.prefix}-{ordinal}"))


def deployment(name: str, prefix: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": PODS,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {FLEET_LABEL: prefix},
                    "tolerations": [{"key": FLEET_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "main", "image": "registry.invalid/hollow:1", "command": ["serve"]}],
                },
            },
        },
    }


@contextlib.contextmanager
def local_node_network() -> Any:
    """A /28 of 198.19.255.0/24 made local to this machine (`ip route add local ... dev lo`), so that the apiserver
    reaches the fleet's nodes at their own addresses; random, so that two runs side by side do not collide."""
    network = ipaddress.ip_network(f"198.19.255.{16 * random.randrange(16)}/28")
    subprocess.run(["ip", "route", "add", "local", str(network), "dev", "lo"], check=True)
    try:
        yield network
    finally:
        subprocess.run(["ip", "route", "del", "local", str(network), "dev", "lo"], check=True)


def free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


async def check_kubelet_api(testbed: Testbed, pods: list[dict[str, Any]]) -> None:
    """Through the apiserver's node proxy (its kubelet client certificate, the node's own address and the fleet's
    port), two nodes answer, each with its own pods and summary."""
    by_node: dict[str, set[str]] = {}
    for pod in pods:
        by_node.setdefault(pod["spec"]["nodeName"], set()).add(pod["metadata"]["name"])
    for node, names in sorted(by_node.items())[:2]:

        async def get(path: str, node: str = node) -> str:
            return await kubectl(testbed.layout.admin_kubeconfig, "get", "--raw", f"/api/v1/nodes/{node}/proxy{path}")

        assert await get("/healthz") == "ok\n"
        served = {p["metadata"]["name"] for p in json.loads(await get("/pods"))["items"]}
        assert served == names, (node, served, names)
        summary = json.loads(await get("/stats/summary"))
        assert summary["node"]["nodeName"] == node
        assert {p["podRef"]["name"] for p in summary["pods"]} == names
        assert "kubelet_pleg_relist_duration_seconds" in await get("/metrics")


def ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def test_fleet_nodes_register_renew_and_run_a_deployment(
    admin: KubeClient, testbed: Testbed, settings: Settings, tmp_path: Path
) -> None:
    prefix = f"fleet-{uuid.uuid4().hex[:6]}"
    with local_node_network() as network:
        addresses = [str(a) for a in list(network.hosts())[:NODES]]
        # The kubelet API's certificate from the CA the apiserver trusts for kubelets (--kubelet-certificate-authority),
        # for every node address; client certificates (the apiserver's kubelet client) of the same CA.
        serving = CertificateAuthority.load(testbed.layout.pki).issue(
            tmp_path, "fleet-kubelet", common_name="nodeagent-fleet", server=True, ip_addresses=tuple(addresses)
        )
        async with bootstrap_token(admin, expires_in=datetime.timedelta(hours=1), bindings=KUBEADM_BINDINGS) as token:
            boot = bootstrap_kubeconfig(tmp_path / "bootstrap.conf", testbed, settings, token)
            options = FleetOptions(
                nodes=NODES,
                prefix=prefix,
                directory=tmp_path / "fleet",
                bootstrap_kubeconfig=boot,
                node_network=str(network),
                kubelet_port=free_port(addresses[0]),
                tls_cert_file=serving.cert,
                tls_private_key_file=serving.key,
                client_ca_file=testbed.layout.pki / "ca.crt",
            )
            await _run_fleet(admin, testbed, options, tmp_path)


async def _run_fleet(admin: KubeClient, testbed: Testbed, options: FleetOptions, tmp_path: Path) -> None:
    prefix = options.prefix
    log = tmp_path / "fleet.log"
    async with running_fleet(options, admin, log) as fleet:

        def tail() -> str:
            return "\n".join(log.read_text(errors="replace").splitlines()[-30:])

        async def all_ready() -> list[dict[str, Any]] | None:
            assert fleet.poll() is None, f"the fleet exited with {fleet.returncode}:\n{tail()}"
            nodes = (await admin.list(paths.nodes(), label_selector=f"{FLEET_LABEL}={prefix}"))["items"]
            return nodes if len(nodes) == NODES and all(ready(n) for n in nodes) else None

        nodes = await until(all_ready, timeout=60, what=f"{NODES} fleet nodes Ready")
        for node in nodes:
            # (the node controller's not-ready taint may still be there, for a moment)
            assert {"key": FLEET_LABEL, "value": prefix, "effect": "NoSchedule"} in node["spec"]["taints"]
            assert node["status"]["nodeInfo"]["containerRuntimeVersion"] == "fakeRuntime://0.1.0"
        names = [n["metadata"]["name"] for n in nodes]

        async def all_leased() -> dict[str, dict[str, Any]] | None:
            # Ready comes with the node status; the Lease is made beside it, a moment apart under load.
            found = {}
            for lease_name in names:
                try:
                    found[lease_name] = await admin.get(paths.lease("kube-node-lease", lease_name))
                except NotFound:
                    return None
            return found

        leases: dict[str, dict[str, Any]] = await until(all_leased, timeout=30, what="every node's Lease")
        for name, lease in leases.items():
            assert lease["spec"]["holderIdentity"] == name

        # Every node holds its own credential (system:node:<name>), and NodeRestriction keeps it to its node.
        first, second = f"{prefix}-0", f"{prefix}-1"
        async with KubeClient.from_kubeconfig(options.directory / "nodes" / first / "kubelet.conf") as node_client:
            await node_client.patch(paths.node(first), {"metadata": {"labels": {"example.com/self": "ok"}}})
            with pytest.raises(Forbidden):
                await node_client.patch(paths.node(second), {"metadata": {"labels": {"example.com/other": "x"}}})

        name = f"{prefix}-web"
        await admin.create(DEPLOYMENTS, deployment(name, prefix))
        try:

            async def all_running() -> list[dict[str, Any]] | None:
                pods = (await admin.list(paths.pods(NS), label_selector=f"app={name}"))["items"]
                running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
                return running if len(running) == PODS else None

            pods = await until(all_running, timeout=60, what=f"{PODS} pods Running")
            network = ipaddress.ip_network(DEFAULT_POD_NETWORK)
            addresses = {p["status"]["podIP"] for p in pods}
            assert len(addresses) == PODS and all(ipaddress.ip_address(a) in network for a in addresses)
            assert {p["spec"]["nodeName"] for p in pods} <= set(leases)
            for pod in pods:
                (status,) = pod["status"]["containerStatuses"]
                assert status["ready"] and "running" in status["state"]
                # The type is the fake runtime's name from its Version answer, as kubemark's hollow nodes say.
                assert status["containerID"].startswith("fakeRuntime://")
            await check_kubelet_api(testbed, pods)

            # Leases renewed (every 10 s: a quarter of the 40 s lease) by every node.
            async def all_renewed() -> bool:
                for lease_name, lease in leases.items():
                    now = await admin.get(paths.lease("kube-node-lease", lease_name))
                    if now["spec"]["renewTime"] == lease["spec"]["renewTime"]:
                        return False
                return True

            await until(all_renewed, timeout=30, what="every lease renewed")
        finally:
            with contextlib.suppress(NotFound):
                await admin.delete(f"{DEPLOYMENTS}/{name}")

        async def all_gone() -> bool:
            return not (await admin.list(paths.pods(NS), label_selector=f"app={name}"))["items"]

        await until(all_gone, timeout=60, what="the Deployment's pods deleted")
        assert fleet.poll() is None, tail()
    assert fleet.returncode == 0, f"the fleet exited with {fleet.returncode}:\n{tail()}"
    text = log.read_text()
    assert f"fleet stopped nodes={NODES} failed=0" in text
    # The leases renewed above (each node under NodeRestriction, with its own certificate) were renewed on the
    # fleet's heartbeat thread, which ended with the fleet.
    assert "fleet lease heartbeats started" in text and "fleet lease heartbeats stopped" in text
