"""KWOK's controller (testbed/kwok.py) on the testbed, as `benchmarks/fleet.py --peer kwok` runs it: KWOK accepts the
stages written here, its two nodes (made from a fleet node's template) become Ready with the template's conditions
and renew 40 s leases, and a pod scheduled onto one of them reaches Running with the status fields a fleet node
reports, then is deleted once its deletion begins.

Marker `kwok`, deselected by default: it needs `nodeagent testbed install --with-kwok` (the build, minutes cold,
is not in CI's install). Run with `pytest -m kwok tests/integration/test_kwok.py`."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest

from nodeagent.fleet.plan import DEFAULT_POD_NETWORK, FLEET_LABEL, FleetOptions, plan_nodes
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import kwok
from nodeagent.testbed.testbed import Testbed
from tests.integration.test_fleet import until
from tests.unit.testbed.test_kwok import fleet_node

pytestmark = [pytest.mark.integration, pytest.mark.kwok]
NS = "default"


def conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}


async def test_kwok_runs_nodes_and_pods_from_the_fleet_template(
    testbed: Testbed, admin: KubeClient, tmp_path: Path
) -> None:
    binary = kwok.kwok_path()
    assert binary.is_file(), f"{binary}: run `nodeagent testbed install --with-kwok`"
    prefix = f"kwok-{uuid.uuid4().hex[:5]}"
    template = fleet_node()
    config = tmp_path / "kwok.yaml"
    config.write_text(kwok.kwok_config(kwok.template_conditions(template)))
    argv = kwok.kwok_argv(
        binary,
        kubeconfig=testbed.layout.admin_kubeconfig,
        config=config,
        label_selector=f"{FLEET_LABEL}={prefix}",
        pod_cidr=DEFAULT_POD_NETWORK,
    )
    plans = plan_nodes(FleetOptions(nodes=2, prefix=prefix, directory=tmp_path, kubeconfig=Path("unused")))
    log = tmp_path / "kwok.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=out, stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL
        )
    pod_name = f"{prefix}-pod"
    try:
        for plan in plans:
            body = kwok.kwok_node(
                template,
                name=plan.name,
                label=FLEET_LABEL,
                value=prefix,
                internal_ip=plan.internal_ip,
                machine_id=plan.machine_id,
            )
            await admin.create(paths.nodes(), body)

        async def all_ready() -> list[dict[str, Any]] | None:
            listed = (await admin.list(paths.nodes(), label_selector=f"{FLEET_LABEL}={prefix}"))["items"]
            return listed if len(listed) == 2 and all(conditions(n).get("Ready") == "True" for n in listed) else None

        nodes = await until(all_ready, timeout=60, what=f"KWOK's nodes Ready (log {log})")
        for node in nodes:
            # The template's conditions, as the node-ready stage writes them.
            assert conditions(node) == {"Ready": "True", "MemoryPressure": "False"}
            assert node["status"]["capacity"] == template["status"]["capacity"]
        lease_path = f"{paths.leases('kube-node-lease')}/{plans[0].name}"
        lease = await until(lambda: _lease(admin, lease_path), timeout=30, what=f"{plans[0].name}'s lease (log {log})")
        assert lease["spec"]["leaseDurationSeconds"] == 40
        assert lease["metadata"]["ownerReferences"][0]["name"] == plans[0].name

        async def renewed() -> bool:
            again = await _lease(admin, lease_path)
            return again is not None and again["spec"]["renewTime"] != lease["spec"]["renewTime"]

        await until(renewed, timeout=20, what="a renewal within 20 s (every 10 s)")

        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": NS},
            "spec": {
                "nodeSelector": {FLEET_LABEL: prefix},
                "tolerations": [{"key": FLEET_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
                "terminationGracePeriodSeconds": 1,
                "automountServiceAccountToken": False,
                "containers": [{"name": "main", "image": "registry.invalid/hollow:1"}],
            },
        }
        await admin.create(paths.pods(NS), pod)

        async def running() -> dict[str, Any] | None:
            got = await admin.get(paths.pod(NS, pod_name))
            return got if (got.get("status") or {}).get("phase") == "Running" else None

        got = await until(running, timeout=60, what=f"the pod Running (log {log})")
        status = got["status"]
        node_ips = {plan.name: plan.internal_ip for plan in plans}
        assert status["hostIP"] == node_ips[got["spec"]["nodeName"]]
        assert ipaddress.ip_address(status["podIP"]) in ipaddress.ip_network(DEFAULT_POD_NETWORK)
        assert [ip["ip"] for ip in status["podIPs"]] == [status["podIP"]]
        assert {"PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"} <= set(
            conditions(got)
        )
        (container,) = status["containerStatuses"]
        assert container["containerID"].startswith("kwok://") and len(container["containerID"]) == len("kwok://") + 64
        assert container["ready"] and container["started"] and "running" in container["state"]

        await admin.delete(paths.pod(NS, pod_name))

        async def gone() -> bool:
            try:
                await admin.get(paths.pod(NS, pod_name))
            except NotFound:
                return True
            return False

        await until(gone, timeout=30, what="the pod deleted by the pod-delete stage")
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 20)
            except TimeoutError:
                process.kill()
                await process.wait()
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, pod_name), grace_period_seconds=0)
        for plan in plans:
            with contextlib.suppress(NotFound):
                await admin.delete(paths.node(plan.name))


async def _lease(admin: KubeClient, path: str) -> dict[str, Any] | None:
    try:
        return await admin.get(path)
    except NotFound:
        return None
