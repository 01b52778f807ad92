"""The apiserver goes away for a while and comes back: the node's pods are not disturbed, what happened meanwhile
reaches the API, the node is Ready again, the lease is renewed, and the agent does not re-list everything (issue 34).

The shared testbed's kube-apiserver is stopped for OUTAGE seconds while a pod runs and another pod's container is
made to exit (code 3, restartPolicy Never). When the apiserver returns it writes an audit log of the node's list and
watch requests (nodeagent/testbed/audit.py; the flags stay for later restarts). The apiserver's watch cache starts
afresh, so the agent's watches are answered 410 Gone and its informers list again once each, after their back-off
(as client-go's reflectors do); a client that re-lists in a loop, or per pod, fails here. The node's conditions are
then set Unknown, and the running pod's Ready False, as the node lifecycle controller does after missed heartbeats,
and the agent must put both back: the node's Ready at its next status tick, the pod's at its status manager's next
reconcile (every 10 s, as upstream's needsReconcile).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import audit, configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import (
    NS,
    Agent,
    agent_config,
    clean_up,
    cstatus,
    eventually,
    one_container_pod,
    start_agent,
    stop_agent,
    wait_node_ready,
    wait_running,
)

OUTAGE = 8.0  # seconds the apiserver is down
WINDOW = 5.0  # seconds after the return in which the node's requests are counted at least
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    asyncio.run(clean_up(testbed, settings))
    # A lease renewed every 2 s (a quarter of its duration), so its catch-up is measured in seconds.
    config = agent_config(testbed, tmp_path_factory.mktemp("apiserver-outage") / "nodeagent.yaml",
                          nodeLeaseDurationSeconds=8)  # fmt: skip
    running = start_agent(testbed, testbed.layout.logs / "agent-apiserver-outage.log", config=config)
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


def wall(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


async def test_pods_undisturbed_and_api_caught_up_after_an_apiserver_outage(
    agent: Agent, testbed: Testbed, settings: Settings, admin: KubeClient, cri_client: CRIClient
) -> None:
    await wait_node_ready(admin, agent, settings.node_name)
    image = configs.busybox_image(settings)
    tag = uuid.uuid4().hex[:5]
    steady, exiter = f"steady-{tag}", f"exiter-{tag}"
    labels = {"test": "apiserver-outage"}
    await admin.create(paths.pods(NS), one_container_pod(steady, {"image": image, "command": COMMAND}, labels))
    # Leaves with code 3 when told (SIGUSR1, sent through CRI once the apiserver is down).
    exiting = {"image": image, "command": ["sh", "-c", "trap 'exit 3' USR1; sleep 3600 & wait"]}
    await admin.create(paths.pods(NS), one_container_pod(exiter, exiting, labels, restartPolicy="Never"))
    before = cstatus(await wait_running(admin, agent, steady, "main"), "main")
    exiter_id = cstatus(await wait_running(admin, agent, exiter, "main"), "main")["containerID"].rpartition("://")[2]
    user = f"system:node:{settings.node_name}"
    log, flags = audit.enable(testbed.layout.root, user)

    await testbed.stop_apiserver(grace=1)  # gone at once, as a crash (its graceful stop takes 10 s)
    try:
        await cri_client.runtime.exec_sync(exiter_id, ["kill", "-USR1", "1"], timeout=10)
        await asyncio.sleep(OUTAGE)
        assert agent.proc.poll() is None, f"the agent exited during the outage\n{agent.tail()}"
    finally:
        await testbed.start_apiserver(extra_args=flags)
    returned = time.time()

    async def lease_renewed() -> bool:
        lease: dict[str, Any] = await admin.get(paths.lease("kube-node-lease", settings.node_name))
        return wall(lease["spec"]["renewTime"]) >= returned

    async def exit_reported() -> dict[str, Any] | None:
        pod: dict[str, Any] = await admin.get(paths.pod(NS, exiter))
        terminated = (cstatus(pod, "main").get("state") or {}).get("terminated") or {}
        return pod if pod["status"].get("phase") == "Failed" and terminated.get("exitCode") == 3 else None

    # What the node lifecycle controller writes once the lease is older than its grace period (16 s here, 40 s by
    # default; it may already have): every condition Unknown. The agent must put Ready back at its next status
    # tick (10 s), as upstream's does; it used to leave it until the 5-minute report frequency.
    unknown = {"status": "Unknown", "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status."}
    await admin.patch(
        paths.node(settings.node_name), {"status": {"conditions": [{"type": "Ready", **unknown}]}}, subresource="status"
    )

    # And what it writes to the node's pods: Ready False. The agent must put it back though nothing changed on the
    # node (upstream's status manager reconciles every 10 s against the apiserver's status, needsReconcile).
    await admin.patch(
        paths.pod(NS, steady),
        {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "NodeNotReady"}]}},
        subresource="status",
    )

    async def pod_ready_again() -> bool:
        pod: dict[str, Any] = await admin.get(paths.pod(NS, steady))
        return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])

    async def ready_again() -> bool:
        node: dict[str, Any] = await admin.get(paths.node(settings.node_name))
        return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])

    try:
        await eventually(lease_renewed, timeout=15, what="the lease renewed after the return", agent=agent)
        await eventually(ready_again, timeout=20, what="the node Ready again after the outage", agent=agent)
        await eventually(exit_reported, timeout=20, what="the exit during the outage reported", agent=agent)
        await eventually(pod_ready_again, timeout=30, what="the pod's Ready put back by the node", agent=agent)
        # The running pod was left alone: the same container, never restarted, still running in containerd.
        after = cstatus(await admin.get(paths.pod(NS, steady)), "main")
        assert after["containerID"] == before["containerID"]
        assert after["restartCount"] == 0 and "running" in after["state"]
        cid = before["containerID"].rpartition("://")[2]
        assert [
            c.id
            for c in await cri_client.runtime.list_containers()
            if c.id == cid and c.state == api_pb2.CONTAINER_RUNNING
        ] == [cid]

        # After the outage the apiserver's watch cache starts at etcd's current revision, so a watch from an older
        # one is answered 410 Gone and the informer lists once, after its back-off (as client-go's reflector).
        async def pods_watched() -> dict[str, int] | None:
            counts = audit.requests(log, user, returned - 5, time.time())
            return counts if counts.get("watch pods", 0) >= 1 and time.time() > returned + WINDOW else None

        counts = await eventually(pods_watched, timeout=60, what="the pods watched again", agent=agent)
        print(f"the node's list and watch requests after the return: {counts}")
        lists = {key: n for key, n in counts.items() if key.startswith("list ")}
        assert all(n <= 1 for n in lists.values()), f"re-listed more than once: {lists}\n{agent.tail()}"
        assert agent.proc.poll() is None
    finally:
        for name in (steady, exiter):
            with contextlib.suppress(NotFound):
                await admin.delete(paths.pod(NS, name), grace_period_seconds=0)
