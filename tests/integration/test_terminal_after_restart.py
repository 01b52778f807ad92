"""A pod deleted around an agent crash is removed after the restart (issue 34).

The deterministic form of the issue: the agent is SIGKILLed, a running pod is deleted (grace 30 s), its container and
sandbox are stopped through CRI, and its status is patched to the terminal state the agent had written before the
kill (phase Failed, container terminated 137 Error); then the agent starts again. The pod is terminal both in the
apiserver and in the runtime, so the restarted agent goes straight to the terminated sync, which deletes the pod object
(the upstream kubelet v1.34.4 on the same testbed: 1.9 s after its restart). A second pod is left running in the
runtime with the same terminal status: the agent kills it first, then deletes it. Nothing else deletes such a pod
(the apiserver waits for the kubelet, PodGC only for pods of gone or out-of-service nodes), and the wait below is
shorter than the 30 s grace period.
"""

from __future__ import annotations

import asyncio
import functools
import time
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
from tests.integration.agentproc import (
    NS,
    Agent,
    clean_up,
    eventually,
    start_agent,
    stop_agent,
    wait_node_ready,
    wait_running,
)

UID_LABEL = "io.kubernetes.pod.uid"
# A shell that leaves at SIGTERM: the pod left running is killed without waiting out its grace period.
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
# From the agent's "agent starting" line, well within the pods' 30 s grace period (upstream: 1.9 s after its restart).
REMOVED_WITHIN = 20.0
STARTING = "agent starting node="


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    asyncio.run(clean_up(testbed, settings))
    running = start_agent(testbed, testbed.layout.logs / "agent-terminal-after-restart.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


def sleeper(name: str, image: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"test": "terminal-after-restart"}},
        "spec": {
            "terminationGracePeriodSeconds": 30,
            "automountServiceAccountToken": False,
            "containers": [{"name": "main", "image": image, "command": COMMAND}],
        },
    }


def failed_status(pod: dict[str, Any], container_id: str) -> dict[str, Any]:
    """What the agent had written before it was killed: Failed, the container terminated by SIGKILL."""
    started = next(
        cs["state"]["running"]["startedAt"] for cs in pod["status"]["containerStatuses"] if cs["name"] == "main"
    )
    finished = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "status": {
            "phase": "Failed",
            "conditions": [
                {"type": t, "status": "False", "lastTransitionTime": finished}
                for t in ("Ready", "ContainersReady", "PodReadyToStartContainers")
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "image": pod["spec"]["containers"][0]["image"],
                    "imageID": next(cs["imageID"] for cs in pod["status"]["containerStatuses"]),
                    "containerID": f"containerd://{container_id}",
                    "ready": False,
                    "started": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": 137,
                            "reason": "Error",
                            "startedAt": started,
                            "finishedAt": finished,
                            "containerID": f"containerd://{container_id}",
                        }
                    },
                }
            ],
        }
    }


async def runtime_objects(cri: CRIClient, uid: str) -> list[str]:
    """What containerd still holds of the pod, in any state."""
    found = [f"container {c.id[:12]}" for c in await cri.runtime.list_containers() if c.labels.get(UID_LABEL) == uid]
    found += [f"sandbox {s.id[:12]}" for s in await cri.runtime.list_pod_sandbox() if s.labels.get(UID_LABEL) == uid]
    return found


async def test_a_pod_deleted_and_terminal_while_the_agent_is_down_is_removed(
    testbed: Testbed, settings: Settings, admin: KubeClient, cri_client: CRIClient, agent: Agent
) -> None:
    await wait_node_ready(admin, agent, settings.node_name)
    suffix = uuid.uuid4().hex[:6]
    image = configs.busybox_image(settings)
    stopped, running = f"stopped-{suffix}", f"running-{suffix}"
    for name in (stopped, running):
        await admin.create(paths.pods(NS), sleeper(name, image))
    pods = {name: await wait_running(admin, agent, name, "main") for name in (stopped, running)}
    uids = {name: str(pod["metadata"]["uid"]) for name, pod in pods.items()}

    agent.proc.kill()
    agent.proc.wait(10)
    for name, pod in pods.items():
        await admin.delete(paths.pod(NS, name))  # the pod's own grace: 30 s
        container_id = next(str(cs["containerID"]).rpartition("://")[2] for cs in pod["status"]["containerStatuses"])
        if name == stopped:
            # The agent had stopped the container and the sandbox before it died.
            await cri_client.runtime.stop_container(container_id, 0)
            for sandbox in await cri_client.runtime.list_pod_sandbox():
                if sandbox.labels.get(UID_LABEL) == uids[name]:
                    await cri_client.runtime.stop_pod_sandbox(sandbox.id)
        await admin.patch(
            paths.pod(NS, name), failed_status(pod, container_id), patch_type="merge", subresource="status"
        )
    for name in (stopped, running):
        got = await admin.get(paths.pod(NS, name))
        assert got["metadata"].get("deletionTimestamp") and got["status"]["phase"] == "Failed"
    states = {c.labels.get(UID_LABEL): c.state for c in await cri_client.runtime.list_containers()}
    assert states[uids[stopped]] == api_pb2.CONTAINER_EXITED
    assert states[uids[running]] == api_pb2.CONTAINER_RUNNING

    starts = agent.log.read_text(errors="replace").count(STARTING)
    restarted = start_agent(testbed, agent.log)
    agent.proc = restarted.proc
    spawned = time.monotonic()

    async def starting() -> bool:
        return agent.log.read_text(errors="replace").count(STARTING) > starts

    # From the agent's first line: Python's own start (imports) takes 5-12 s on a loaded 2-core machine.
    await eventually(starting, timeout=60, what="the agent started again", agent=agent)
    started = time.monotonic()

    async def gone(name: str) -> float | None:
        try:
            await admin.get(paths.pod(NS, name))
        except NotFound:
            return time.monotonic() - started
        return None

    async def empty(uid: str) -> bool:
        return not await runtime_objects(cri_client, uid)

    took: dict[str, float] = {}
    for name in (stopped, running):
        took[name] = await eventually(
            functools.partial(gone, name),
            timeout=REMOVED_WITHIN - (time.monotonic() - started),
            what=f"{name} deleted from the apiserver after the restart",
            agent=agent,
        )
    print(
        f"pods removed after the agent's first log line: {', '.join(f'{n} {t:.1f}s' for n, t in took.items())} "
        f"(spawned {started - spawned:.1f}s before that line)"
    )
    for name in (stopped, running):
        await eventually(
            functools.partial(empty, uids[name]), timeout=30, what=f"{name}: nothing left in containerd", agent=agent
        )
    await wait_node_ready(admin, agent, settings.node_name)
