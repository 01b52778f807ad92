"""Sysctls at admission, on the real testbed: an unsafe sysctl the node does not allow is refused before anything
reaches runc (phase Failed, reason SysctlForbidden, upstream's message, a Warning event, no sandbox); a safe one
runs and is set inside the pod; allowedUnsafeSysctls lets an unsafe one through."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
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
from tests.integration.agentproc import (
    NS,
    Agent,
    agent_config,
    clean_up,
    eventually,
    node_ready,
    start_agent,
    stop_agent,
)

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-sysctls.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


def with_sysctls(name: str, settings: Settings, sysctls: dict[str, str]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": settings.node_name,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"sysctls": [{"name": k, "value": v} for k, v in sysctls.items()]},
            "containers": [{"name": "main", "image": configs.busybox_image(settings), "command": ["sleep", "3600"]}],
        },
    }


async def _sandboxes_of(cri: CRIClient, uid: str) -> list[api_pb2.PodSandbox]:
    selector = api_pb2.PodSandboxFilter(label_selector={"io.kubernetes.pod.uid": uid})
    return list(await cri.runtime.list_pod_sandbox(selector))


async def _running(admin: KubeClient, agent: Agent, name: str) -> Obj:
    async def running() -> Obj | None:
        pod = await admin.get(paths.pod(NS, name))
        return pod if (pod.get("status") or {}).get("phase") == "Running" else None

    found: Obj = await eventually(running, timeout=30, what=f"{name} runs", agent=agent)
    return found


async def _read_in_pod(cri: CRIClient, uid: str, path: str) -> str:
    selector = api_pb2.ContainerFilter(label_selector={"io.kubernetes.pod.uid": uid})
    [container] = await cri.runtime.list_containers(selector)
    answer = await cri.runtime.exec_sync(container.id, ["cat", path], timeout=10)
    assert answer.exit_code == 0, answer.stderr
    return answer.stdout.decode().strip()


async def test_an_unsafe_sysctl_is_refused_at_admission(
    agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    name = f"msgmax-{uuid.uuid4().hex[:5]}"
    created = await admin.create(paths.pods(NS), with_sysctls(name, settings, {"kernel.msgmax": "65536"}))
    uid = created["metadata"]["uid"]
    try:

        async def failed() -> Obj | None:
            pod = await admin.get(paths.pod(NS, name))
            return pod if (pod.get("status") or {}).get("phase") == "Failed" else None

        pod = await eventually(failed, timeout=30, what="the pod is refused", agent=agent)
        message = 'forbidden sysctl: "kernel.msgmax" not allowlisted'
        assert (pod["status"]["reason"], pod["status"]["message"]) == ("SysctlForbidden", message)
        events = (await admin.list(paths.events(NS), field_selector=f"involvedObject.uid={uid}"))["items"]
        assert ("Warning", "SysctlForbidden", message) in {(e["type"], e["reason"], e["message"]) for e in events}
        assert not any(e["reason"] == "FailedCreatePodSandBox" for e in events)
        assert await _sandboxes_of(cri_client, uid) == []  # nothing reached the runtime
    finally:
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, name), grace_period_seconds=0)


async def test_a_safe_sysctl_runs_and_is_set_in_the_pod(
    agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    name = f"portrange-{uuid.uuid4().hex[:5]}"
    sysctls = {"net.ipv4.ip_local_port_range": "20000 30000", "net.ipv4.tcp_syncookies": "0"}
    await admin.create(paths.pods(NS), with_sysctls(name, settings, sysctls))
    try:
        pod = await _running(admin, agent, name)
        uid = pod["metadata"]["uid"]
        assert (await _read_in_pod(cri_client, uid, "/proc/sys/net/ipv4/ip_local_port_range")).split() == [
            "20000",
            "30000",
        ]
        assert await _read_in_pod(cri_client, uid, "/proc/sys/net/ipv4/tcp_syncookies") == "0"
    finally:
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, name), grace_period_seconds=0)


async def test_allowed_unsafe_sysctls_let_a_pattern_through(
    agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient, testbed: Testbed, tmp_path: Path
) -> None:
    # The module's agent, restarted with kernel.msg* allowed (same node, same pods).
    stop_agent(agent)
    config = agent_config(testbed, tmp_path / "allow-msg.yaml", allowedUnsafeSysctls=["kernel.msg*"])
    allowing = start_agent(testbed, testbed.layout.logs / "agent-sysctls-allowed.log", config=config)
    name = f"msgmax-ok-{uuid.uuid4().hex[:5]}"
    try:
        await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=allowing)
        await admin.create(paths.pods(NS), with_sysctls(name, settings, {"kernel.msgmax": "65536"}))
        pod = await _running(admin, allowing, name)
        # In the pod's own IPC namespace; the node's is untouched.
        assert await _read_in_pod(cri_client, pod["metadata"]["uid"], "/proc/sys/kernel/msgmax") == "65536"
        host = await asyncio.to_thread(Path("/proc/sys/kernel/msgmax").read_text)
        assert host.strip() != "65536"
    finally:
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, name), grace_period_seconds=0)
        stop_agent(allowing)
