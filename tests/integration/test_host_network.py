"""hostNetwork pods on the real testbed, from the apiserver and from the static pod directory.

A host-network pod shares the node's network and UTS namespaces: it runs (the sandbox gets no hostname of its own,
which runc could not set there), `hostname` in it prints the node's, its podIP is the node IP (the agent runs with
--node-ip of the testbed's node address, its bridge's gateway: upstream reports the node's InternalIP), and a second
host-network pod asking for a host port already taken is refused at admission with the NodePorts predicate's reason
and message, as upstream. The tests look at the apiserver as admin and into the containers through CRI ExecSync;
the static pod is a manifest in the testbed's staticPodPath.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from cri.client import CRIClient
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import NS, Agent, clean_up, eventually, node_ready, start_agent, stop_agent

Obj = dict[str, Any]
MANIFEST = "hostnet-static.yaml"
NODE_PORTS_MESSAGE = "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-host-network.log")
    try:
        yield running
    finally:
        (testbed.layout.manifests / MANIFEST).unlink(missing_ok=True)
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


def _name(prefix: str) -> str:
    return f"hostnet-{prefix}-{uuid.uuid4().hex[:5]}"


_HANDED_OUT: set[int] = set()


def _free_port(node_ip: str) -> int:
    """A port free on the node, and never handed out before in this module: an earlier test's pod still holds its
    hostPort in the API though nothing listens on it, so the kernel may offer it again, and the scheduler's
    NodePorts filter then keeps the new pod Pending (seen in a CI run on 2026-11-30: "didn't have free ports")."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((node_ip, 0))
            port: int = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def host_network_pod(name: str, image: str, ports: list[Obj], **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "hostNetwork": True,
            "terminationGracePeriodSeconds": 2,
            "automountServiceAccountToken": False,
            "containers": [{"name": "main", "image": image, "command": ["sleep", "3600"], "ports": ports}],
            **spec,
        },
    }


async def get_pod(admin: KubeClient, name: str) -> Obj | None:
    with contextlib.suppress(NotFound):
        pod: Obj = await admin.get(paths.pod(NS, name))
        return pod
    return None


def running_id(pod: Obj | None) -> str:
    """The main container's ID once the pod is Running with it running."""
    status = (pod or {}).get("status") or {}
    statuses = status.get("containerStatuses") or []
    if status.get("phase") != "Running" or not statuses or "running" not in (statuses[0].get("state") or {}):
        return ""
    return str(statuses[0].get("containerID", "")).rpartition("://")[2]


async def wait_running(admin: KubeClient, agent: Agent, name: str) -> Obj:
    async def check() -> Obj | None:
        pod = await get_pod(admin, name)
        return pod if running_id(pod) else None

    got: Obj = await eventually(check, timeout=90, what=f"{name} Running", agent=agent)
    return got


async def exec_out(cri: CRIClient, container_id: str, *command: str) -> str:
    response = await cri.runtime.exec_sync(container_id, list(command), 10)
    assert response.exit_code == 0, response.stderr
    return response.stdout.decode().strip()


async def assert_on_the_node(cri: CRIClient, pod: Obj, node_ip: str) -> None:
    """The container sees the node's hostname and shares its network and UTS namespaces; the pod's IP is the node's."""
    container_id = running_id(pod)
    assert await exec_out(cri, container_id, "hostname") == socket.gethostname()
    for ns in ("net", "uts"):
        assert await exec_out(cri, container_id, "readlink", f"/proc/self/ns/{ns}") == os.readlink(
            f"/proc/self/ns/{ns}"
        )
    status = pod["status"]
    assert status["podIP"] == node_ip
    assert status["podIPs"] == [{"ip": node_ip}]
    assert status["hostIP"] == node_ip


async def test_api_host_network_pod_runs_on_the_node_network_and_hostname(
    agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    name = _name("api")
    port = _free_port(settings.node_ip)
    created = await admin.create(
        paths.pods(NS), host_network_pod(name, configs.busybox_image(settings), [{"containerPort": port}])
    )
    # The apiserver defaults a host-network pod's hostPort to its containerPort, as the admission check relies on.
    assert created["spec"]["containers"][0]["ports"][0]["hostPort"] == port
    pod = await wait_running(admin, agent, name)
    await assert_on_the_node(cri_client, pod, settings.node_ip)
    # No sandbox hostname was asked for, so nothing failed on the way.
    sandbox_failures = await admin.list(
        paths.events(NS), field_selector=f"involvedObject.name={name},reason=FailedCreatePodSandBox"
    )
    assert sandbox_failures["items"] == []


async def test_static_host_network_pod_runs_and_its_mirror_reports_the_node_ip(
    agent: Agent, admin: KubeClient, testbed: Testbed, settings: Settings, cri_client: CRIClient
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    manifest = host_network_pod("hostnet-static", configs.busybox_image(settings), [])
    del manifest["metadata"]["namespace"]  # a static pod's namespace defaults to "default"
    path = testbed.layout.manifests / MANIFEST
    tmp = testbed.layout.manifests / f".{MANIFEST}.tmp"
    tmp.write_text(yaml.safe_dump(manifest))
    tmp.rename(path)
    mirror_name = f"hostnet-static-{settings.node_name}"
    try:
        mirror = await wait_running(admin, agent, mirror_name)
        assert mirror["metadata"]["annotations"]["kubernetes.io/config.source"] == "file"
        await assert_on_the_node(cri_client, mirror, settings.node_ip)
    finally:
        path.unlink(missing_ok=True)

    async def gone() -> bool:
        listed = await cri_client.runtime.list_containers()
        return await get_pod(admin, mirror_name) is None and not [
            c for c in listed if c.labels.get("io.kubernetes.pod.name") == mirror_name and c.state == 1
        ]

    await eventually(gone, timeout=60, what="static pod and mirror gone", agent=agent)


async def test_second_pod_on_a_taken_host_port_is_refused_at_admission(
    agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    image = configs.busybox_image(settings)
    port = _free_port(settings.node_ip)
    first = _name("first")
    await admin.create(paths.pods(NS), host_network_pod(first, image, [{"containerPort": port}]))
    await wait_running(admin, agent, first)

    # Bound to the node directly, past the scheduler (whose own NodePorts filter would keep it Pending): the agent's
    # admission is what refuses it.
    second = _name("second")
    await admin.create(
        paths.pods(NS),
        host_network_pod(second, image, [{"containerPort": port}], nodeName=settings.node_name),
    )

    async def refused() -> Obj | None:
        pod = await get_pod(admin, second)
        return pod if ((pod or {}).get("status") or {}).get("phase") == "Failed" else None

    pod = await eventually(refused, timeout=60, what=f"{second} Failed", agent=agent)
    assert (pod["status"]["reason"], pod["status"]["message"]) == ("NodePorts", NODE_PORTS_MESSAGE)
    events = await admin.list(paths.events(NS), field_selector=f"involvedObject.name={second},reason=NodePorts")
    assert [e["message"] for e in events["items"]] == [NODE_PORTS_MESSAGE]
    sandboxes = await cri_client.runtime.list_pod_sandbox()
    assert not [s for s in sandboxes if s.metadata.name == second]

    # The same port number over UDP is another port: admitted, and it runs beside the first.
    third = _name("udp")
    await admin.create(
        paths.pods(NS),
        host_network_pod(third, image, [{"containerPort": port, "protocol": "UDP"}], nodeName=settings.node_name),
    )
    await wait_running(admin, agent, third)
