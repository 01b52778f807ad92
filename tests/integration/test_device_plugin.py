"""Device plugins on the real testbed, with upstream's sample device plugin (example.com/resource: Dev-1, Dev-2)
run on the host beside the agent: its devices become the Node's capacity and allocatable, a pod asking for one runs
with the device's file mounted, a pod asking for more than is left is refused at admission with upstream's reason
and message, a restarted agent keeps the allocation, and a plugin that restarts registers again."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.podresources.v1 import api_pb2 as podresources_pb2
from nodeagent.podresources.v1 import api_pb2_grpc as podresources_grpc
from nodeagent.testbed import configs
from nodeagent.testbed import sampledeviceplugin as sample
from nodeagent.testbed.install import Progress
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import NS, Agent, clean_up, eventually, node_ready, start_agent, stop_agent

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def plugin_binary() -> Path:
    return sample.build_sample_device_plugin(Progress(lambda message: None))


class Running:
    def __init__(self, testbed: Testbed) -> None:
        self.testbed = testbed
        self.agent: Agent | None = None
        self.plugin: subprocess.Popen[bytes] | None = None

    def start_agent(self) -> Agent:
        self.agent = start_agent(self.testbed, self.testbed.layout.logs / "agent-devices.log")
        return self.agent

    def stop_agent(self) -> None:
        if self.agent is not None:
            stop_agent(self.agent)

    def start_plugin(self, binary: Path) -> None:
        log = self.testbed.layout.logs / "sample-device-plugin.log"
        self.plugin = sample.start(binary, self.testbed.layout.kubelet_root, log)

    def stop_plugin(self) -> None:
        if self.plugin is not None and self.plugin.poll() is None:
            self.plugin.send_signal(signal.SIGTERM)
            try:
                self.plugin.wait(10)
            except subprocess.TimeoutExpired:
                self.plugin.kill()
                self.plugin.wait(5)


@pytest.fixture(scope="module")
def running(testbed: Testbed, settings: Settings) -> Iterator[Running]:
    parts = Running(testbed)
    parts.start_agent()
    try:
        yield parts
    finally:
        parts.stop_plugin()
        parts.stop_agent()
        asyncio.run(clean_up(testbed, settings))
        for device in sample.DEVICES:  # the files the plugin's Allocate made
            Path("/tmp", device).unlink(missing_ok=True)


def device_pod(name: str, settings: Settings, count: int) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            # Bound by name, not scheduled: the agent's admission decides, as for a pod the scheduler raced.
            "nodeName": settings.node_name,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": configs.busybox_image(settings),
                    "command": ["sleep", "3600"],
                    "resources": {"limits": {sample.RESOURCE: str(count)}},
                }
            ],
        },
    }


async def _resource(admin: KubeClient, node: str) -> tuple[str | None, str | None]:
    status = (await admin.get(paths.node(node))).get("status") or {}
    return (status.get("capacity") or {}).get(sample.RESOURCE), (status.get("allocatable") or {}).get(sample.RESOURCE)


async def _phase(admin: KubeClient, name: str, phase: str) -> Obj | None:
    pod = await admin.get(paths.pod(NS, name))
    return pod if (pod.get("status") or {}).get("phase") == phase else None


async def _devices_seen(cri: CRIClient, uid: str) -> list[str]:
    selector = api_pb2.ContainerFilter(
        label_selector={"io.kubernetes.pod.uid": uid},
        state=api_pb2.ContainerStateValue(state=api_pb2.CONTAINER_RUNNING),
    )
    [container] = await cri.runtime.list_containers(selector)
    answer = await cri.runtime.exec_sync(container.id, ["sh", "-c", "ls /tmp"], timeout=10)
    assert answer.exit_code == 0, answer.stderr
    return sorted(n for n in answer.stdout.decode().split() if n in sample.DEVICES)


async def test_the_sample_plugin_serves_pods_through_the_agent(
    running: Running, plugin_binary: Path, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    agent = running.start_agent() if running.agent is None else running.agent
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=agent)
    running.start_plugin(plugin_binary)

    async def advertised() -> bool:
        return await _resource(admin, settings.node_name) == ("2", "2")

    await eventually(advertised, timeout=40, what="example.com/resource 2 on the Node", agent=agent)

    first = f"dev-one-{uuid.uuid4().hex[:5]}"
    await admin.create(paths.pods(NS), device_pod(first, settings, 1))
    pod = await eventually(lambda: _phase(admin, first, "Running"), timeout=60, what=f"{first} runs", agent=agent)
    uid = pod["metadata"]["uid"]
    held = await _devices_seen(cri_client, uid)
    assert len(held) == 1, held
    # The PodResources API names the same device.
    assert await _pod_resources_devices(running, first) == [(sample.RESOURCE, held)]

    # Two asked, one left: refused by the device manager before the predicates, as upstream.
    greedy = f"dev-two-{uuid.uuid4().hex[:5]}"
    await admin.create(paths.pods(NS), device_pod(greedy, settings, 2))
    refused = await eventually(lambda: _phase(admin, greedy, "Failed"), timeout=30, what="refused", agent=agent)
    assert refused["status"]["reason"] == "UnexpectedAdmissionError"
    assert refused["status"]["message"] == (
        "Allocate failed due to requested number of devices unavailable for example.com/resource. "
        "Requested: 2, Available: 1, which is unexpected"
    )
    with contextlib.suppress(NotFound):
        await admin.delete(paths.pod(NS, greedy), grace_period_seconds=0)

    # The agent restarts: the running pod keeps its device (checkpoint), the plugin registers again (it watches
    # kubelet.sock being made anew), and a new pod gets the other device.
    running.stop_agent()
    agent = running.start_agent()
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready again", agent=agent)
    checkpoint = settings_root(running) / "device-plugins" / "kubelet_internal_checkpoint"
    assert checkpoint.is_file()

    async def registered_again() -> bool:
        # Before that, a new pod bound here would be refused (no healthy device), as upstream.
        return agent.log.read_text().count("device plugin connected resource=example.com/resource") >= 2

    await eventually(registered_again, timeout=40, what="the plugin registered with the new agent", agent=agent)
    # And the Node says so (the new agent's first status may have shown the resource at 0 before that).
    await eventually(advertised, timeout=40, what="example.com/resource 2 again", agent=agent)
    second = f"dev-other-{uuid.uuid4().hex[:5]}"
    await admin.create(paths.pods(NS), device_pod(second, settings, 1))
    pod2 = await eventually(lambda: _phase(admin, second, "Running"), timeout=90, what=f"{second} runs", agent=agent)
    other = await _devices_seen(cri_client, pod2["metadata"]["uid"])
    assert len(other) == 1 and other != held, (held, other)
    assert await _devices_seen(cri_client, uid) == held

    # The plugin goes away: its devices are unhealthy (allocatable 0, capacity kept); back, it registers again.
    running.stop_plugin()

    async def gone() -> bool:
        return await _resource(admin, settings.node_name) == ("2", "0")

    await eventually(gone, timeout=40, what="allocatable 0 without the plugin", agent=agent)
    running.start_plugin(plugin_binary)
    await eventually(advertised, timeout=40, what="the plugin registered again", agent=agent)


async def _pod_resources_devices(running: Running, name: str) -> list[tuple[str, list[str]]]:
    socket = running.testbed.layout.kubelet_root / "pod-resources" / "kubelet.sock"
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        listed = await podresources_grpc.PodResourcesListerStub(channel).List(
            podresources_pb2.ListPodResourcesRequest()
        )
    [pod] = [p for p in listed.pod_resources if (p.namespace, p.name) == (NS, name)]
    [main] = pod.containers
    return [(d.resource_name, list(d.device_ids)) for d in main.devices]


def settings_root(running: Running) -> Path:
    return running.testbed.layout.kubelet_root
