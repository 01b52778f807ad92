"""Admission reads the node's labels as they are now, on the real testbed (issue 30).

Two certified specs failed on nodeagent nodes for one cause: `Daemon set [Serial] should run and stop complex
daemon` relabels a node and waits for the daemon pod there, and `SchedulerPredicates [Serial] validates resource
limits of pods that are allowed to run` labels the nodes and at once creates pods with node affinity on the label.
nodeagent refused those pods `NodeAffinity` against the Node object its status manager had last read (refreshed at
its 10 s tick at best). Upstream's kubelet admits against its node informer. Here the node is labelled and a pod
that selects the label is bound to it a second later: it must run. Then the label goes and a second such pod must be
refused, with upstream's reason, a second after. With admission reading the status manager's copy instead (the code
before the node watch) the test failed in 3 runs of 3: the first pod refused, or the second pod running, each against
a copy of the Node older than the label's change. With the watch: 4 of 4 passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import NS, Agent, eventually, module_agent, node_ready, one_container_pod

Obj = dict[str, Any]
LABEL = "nodeagent.test/color"
# Between the label and the pod: the Node's watch event and the pod's travel on two watches, and the pod's can come
# first by a few milliseconds (a pod created right after the label was refused in 1 of 3 runs with the node watch;
# upstream's informers race alike). In a cluster the DaemonSet controller and the scheduler stand between the two;
# here a second does. Still far inside the status manager's 10 s tick, which the code before the watch read.
SETTLE = 1.0


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    with module_agent(testbed, settings, "agent-node-labels.log") as running:
        yield running


def selecting(name: str, settings: Settings, color: str) -> Obj:
    container = {"image": configs.busybox_image(settings), "command": ["sleep", "3600"]}
    pod = one_container_pod(name, container, {}, nodeName=settings.node_name, nodeSelector={LABEL: color})
    pod["metadata"]["namespace"] = NS
    return pod


async def _label(admin: KubeClient, settings: Settings, color: str | None) -> None:
    await admin.patch(paths.node(settings.node_name), {"metadata": {"labels": {LABEL: color}}}, patch_type="merge")


async def _phase(admin: KubeClient, agent: Agent, name: str, wanted: str) -> Obj:
    async def reached() -> Obj | None:
        pod = await admin.get(paths.pod(NS, name))
        phase = (pod.get("status") or {}).get("phase")
        assert phase in (None, "Pending", wanted), pod.get("status") or {}
        return pod if phase == wanted else None

    found: Obj = await eventually(reached, timeout=60, what=f"{name} {wanted}", agent=agent)
    return found


async def test_a_pod_selecting_a_label_just_added_runs_and_one_just_removed_is_refused(
    agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=agent)
    suffix = uuid.uuid4().hex[:5]
    green, blue = f"green-{suffix}", f"blue-{suffix}"
    try:
        await _label(admin, settings, "green")
        await asyncio.sleep(SETTLE)
        await admin.create(paths.pods(NS), selecting(green, settings, "green"))
        await _phase(admin, agent, green, "Running")

        await _label(admin, settings, None)
        await asyncio.sleep(SETTLE)
        await admin.create(paths.pods(NS), selecting(blue, settings, "green"))
        refused = await _phase(admin, agent, blue, "Failed")
        assert refused["status"].get("reason") == "NodeAffinity"
        assert "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector" in str(
            refused["status"].get("message")
        )
    finally:
        with contextlib.suppress(NotFound):
            await _label(admin, settings, None)
        for name in (green, blue):
            with contextlib.suppress(NotFound):
                await admin.delete(paths.pod(NS, name), grace_period_seconds=0)
