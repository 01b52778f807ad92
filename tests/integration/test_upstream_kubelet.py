"""The upstream kubelet as the testbed's node (nodeagent/testbed/upstreamkubelet.py), on the real testbed.

It registers the node Ready (reporting v1.34.4), runs a busybox pod to Running and to Succeeded, refuses to run
twice and keeps nodeagent off the node while it runs; once stopped it leaves nothing in containerd nor under its
root-dir (not even the bind mount of the root-dir onto itself that it makes at start), and nodeagent then starts
on the same testbed and runs a pod: the hand-over the differential corpus and benchmarks/versus rely on.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from cri.client import CRIClient
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.processes import tail
from nodeagent.testbed.testbed import UPSTREAM_KUBELET, Testbed
from nodeagent.testbed.upstreamkubelet import (
    KubeletProcess,
    NodeHeld,
    node_holders,
    start_kubelet,
    stop_kubelet,
)
from nodeagent.testbed.versions import KUBERNETES_VERSION
from tests.integration.agentproc import (
    NS,
    clean_up,
    one_container_pod,
    start_agent,
    stop_agent,
    wait_node_ready,
)

Obj = dict[str, Any]


async def _wait_phase(admin: KubeClient, name: str, phase: str, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        seen = await _phase(admin, name)
        if seen == phase:
            return
        await asyncio.sleep(0.25)
    raise AssertionError(f"{name}: phase {seen!r}, not {phase} after {timeout:.0f}s\n--- {log} ---\n{tail(log, 60)}")


def _pod(name: str, image: str, command: str) -> Obj:
    return one_container_pod(
        name, {"image": image, "command": ["sh", "-c", command]}, {"test": "upstream-kubelet"}, restartPolicy="Never"
    )


async def _phase(admin: KubeClient, name: str) -> str:
    pod: Obj = await admin.get(paths.pod(NS, name))
    return str((pod.get("status") or {}).get("phase", ""))


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root.resolve())
    return [
        line.split()[1]
        for line in Path("/proc/self/mounts").read_text().splitlines()
        if line.split()[1] == prefix or line.split()[1].startswith(prefix + "/")
    ]


async def test_kubelet_runs_a_pod_then_hands_the_node_to_nodeagent(
    testbed: Testbed, settings: Settings, admin: KubeClient, cri_client: CRIClient, tmp_path: Path
) -> None:
    await clean_up(testbed, settings)  # a node and runtime of nobody's: what earlier modules ran is gone
    image = configs.busybox_image(settings)
    kubelet: KubeletProcess = await start_kubelet(testbed, tmp_path / "kubelet.log")
    name = f"upstream-{uuid.uuid4().hex[:6]}"
    try:
        node: Obj = await admin.get(paths.node(settings.node_name))
        assert node["status"]["nodeInfo"]["kubeletVersion"] == KUBERNETES_VERSION
        assert (testbed.layout.pids / f"{UPSTREAM_KUBELET}.json").exists()

        # Only one agent runs as the node: a second kubelet and nodeagent are both refused, naming the holder.
        with pytest.raises(NodeHeld, match=f"kubelet pid {kubelet.pid}"):
            await start_kubelet(testbed, tmp_path / "second.log")
        with pytest.raises(NodeHeld, match="cannot start nodeagent"):
            await testbed.start_agent()
        assert kubelet.alive()

        await admin.create(paths.pods(NS), _pod(name, image, "sleep 3; echo done"))
        await _wait_phase(admin, name, "Running", kubelet.log)
        await _wait_phase(admin, name, "Succeeded", kubelet.log)
        pod: Obj = await admin.get(paths.pod(NS, name))
        terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
        assert await cri_client.runtime.list_pod_sandbox(), "the kubelet's sandbox is in the testbed's containerd"
    finally:
        await stop_kubelet(kubelet)

    # Nothing of it is left: process, pid file, sandboxes, containers, mounts, files under its root-dir.
    assert not kubelet.alive()
    assert node_holders(testbed.layout) == []
    assert not (testbed.layout.pids / f"{UPSTREAM_KUBELET}.json").exists()
    assert await cri_client.runtime.list_pod_sandbox() == []
    assert await cri_client.runtime.list_containers() == []
    assert _mounts_under(kubelet.root_dir) == []
    assert list(kubelet.root_dir.iterdir()) == []
    assert not (Path("/sys/fs/cgroup/memory") / kubelet.cgroup_root.strip("/") / "kubepods").exists()

    # The hand-over: nodeagent takes the same node on the same containerd and runs a pod.
    await admin.delete(paths.pod(NS, name), grace_period_seconds=0)
    agent = start_agent(testbed, tmp_path / "agent.log")
    after = f"after-{uuid.uuid4().hex[:6]}"
    try:
        await wait_node_ready(admin, agent, settings.node_name)
        await admin.create(paths.pods(NS), _pod(after, image, "sleep 3600"))
        await _wait_phase(admin, after, "Running", agent.log)
        sandboxes = await cri_client.runtime.list_pod_sandbox()
        assert [s.metadata.name for s in sandboxes] == [after]
    finally:
        stop_agent(agent)
        await clean_up(testbed, settings)
