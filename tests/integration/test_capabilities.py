"""Container capabilities on the real testbed: what securityContext.capabilities adds and drops is what the process
has (its CapEff in /proc/1/status), with the names as the pod spec has them and the runtime adding the CAP_ prefix.

Before this test nodeagent prefixed the names itself, containerd prefixed them again ("CAP_CAP_NET_ADMIN"), and runc
ignored them: nothing was added or dropped (found when CoreDNS could not bind port 53 on a kubeadm cluster)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import NS, Agent, clean_up, eventually, node_ready, start_agent, stop_agent

Obj = dict[str, Any]

# Bit numbers from linux/capability.h.
CAP_CHOWN = 0
CAP_NET_BIND_SERVICE = 10
CAP_NET_ADMIN = 12
CAP_NET_RAW = 13


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-capabilities.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


def with_capabilities(name: str, settings: Settings, capabilities: Obj) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": settings.node_name,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": configs.busybox_image(settings),
                    "command": ["sleep", "3600"],
                    "securityContext": {"capabilities": capabilities},
                }
            ],
        },
    }


async def effective_capabilities(admin: KubeClient, agent: Agent, cri: CRIClient, name: str) -> int:
    async def running() -> Obj | None:
        pod = await admin.get(paths.pod(NS, name))
        return pod if (pod.get("status") or {}).get("phase") == "Running" else None

    pod = await eventually(running, timeout=30, what=f"{name} runs", agent=agent)
    selector = api_pb2.ContainerFilter(label_selector={"io.kubernetes.pod.uid": pod["metadata"]["uid"]})
    [container] = await cri.runtime.list_containers(selector)
    answer = await cri.runtime.exec_sync(container.id, ["cat", "/proc/1/status"], timeout=10)
    assert answer.exit_code == 0, answer.stderr
    [line] = [line for line in answer.stdout.decode().splitlines() if line.startswith("CapEff:")]
    return int(line.split()[1], 16)


@pytest.mark.parametrize(
    ("capabilities", "present", "absent"),
    [
        # containerd's default set has NET_RAW and CHOWN but not NET_ADMIN.
        ({"add": ["NET_ADMIN"], "drop": ["NET_RAW"]}, {CAP_NET_ADMIN, CAP_CHOWN}, {CAP_NET_RAW}),
        ({"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}, {CAP_NET_BIND_SERVICE}, {CAP_CHOWN, CAP_NET_RAW}),
    ],
    ids=["add-net-admin-drop-net-raw", "drop-all-add-bind"],
)
async def test_added_and_dropped_capabilities_are_what_the_process_has(
    agent: Agent,
    admin: KubeClient,
    settings: Settings,
    cri_client: CRIClient,
    capabilities: Obj,
    present: set[int],
    absent: set[int],
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    name = f"caps-{uuid.uuid4().hex[:5]}"
    await admin.create(paths.pods(NS), with_capabilities(name, settings, capabilities))
    try:
        effective = await effective_capabilities(admin, agent, cri_client, name)
        assert {bit for bit in present if not effective >> bit & 1} == set(), hex(effective)
        assert {bit for bit in absent if effective >> bit & 1} == set(), hex(effective)
        if capabilities.get("drop") == ["ALL"]:
            assert effective == 1 << CAP_NET_BIND_SERVICE
    finally:
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, name), grace_period_seconds=0)
