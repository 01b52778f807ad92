"""`nodeagent fleet` on the testbed: 10 emulated nodes, each with its own client certificate from TLS bootstrap,
register, become Ready and renew their leases; NodeRestriction holds between them; a Deployment of 30 pods is
scheduled onto them, reaches Running with addresses from the fleet's pod network, and is deleted cleanly.

The fleet runs as `python -m nodeagent fleet` in a process of its own, stopped by SIGTERM at the end (exit 0: no
node failed). About 15 s on a quiet 2-core machine, most of it waiting for the first lease renewal (10 s); 40 s at a
load average of 60, 113 s at 270."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import signal
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
from nodeagent.testbed.layout import Settings
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


def ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def test_fleet_nodes_register_renew_and_run_a_deployment(
    admin: KubeClient, testbed: Testbed, settings: Settings, tmp_path: Path
) -> None:
    prefix = f"fleet-{uuid.uuid4().hex[:6]}"
    async with bootstrap_token(admin, expires_in=datetime.timedelta(hours=1), bindings=KUBEADM_BINDINGS) as token:
        boot = bootstrap_kubeconfig(tmp_path / "bootstrap.conf", testbed, settings, token)
        options = FleetOptions(nodes=NODES, prefix=prefix, directory=tmp_path / "fleet", bootstrap_kubeconfig=boot)
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
