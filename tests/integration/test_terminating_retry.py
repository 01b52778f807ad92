"""A pod whose termination failed, and that then left the apiserver, is still terminated (issue 34, the soak).

The soak saw it under heavy load: StopContainer returned DEADLINE_EXCEEDED, the pod was then removed from the
apiserver, and its sandbox, veth and address stayed for good. Here the runtime's slowness is made on purpose and for
this pod only: its shim (containerd-shim-runc-v2 of its sandbox) is stopped with SIGSTOP, so containerd's kill of the
container waits on it, and the agent runs with runtimeRequestTimeout 5 s, so that its StopContainer ends in
DEADLINE_EXCEEDED after 5 s plus the grace period. The pod is deleted (grace 2 s), the termination fails, the pod is
force-deleted, and the kill that removal brings fails too; the agent must go on trying (every housekeeping pass), and
once the shim continues, leave nothing of the pod in containerd. Before the fix nothing tried after the removal's
kill: the container ended (the signal the shim had queued) and the sandbox stayed ready with its network.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cri.client import CRIClient
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
    one_container_pod,
    start_agent,
    stop_agent,
    wait_node_ready,
    wait_running,
)

UID_LABEL = "io.kubernetes.pod.uid"
FAILED = "pod worker sync failed pod={ref} "
# The pod's leftovers must be gone within this many seconds of the shim continuing (housekeeping runs every 2 s).
CLEANED_WITHIN = 20.0

_stopped: list[int] = []  # shims this module stopped: continued whatever happens


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    asyncio.run(clean_up(testbed, settings))
    config = agent_config(testbed, tmp_path_factory.mktemp("retry") / "nodeagent.yaml", runtimeRequestTimeout="5s")
    running = start_agent(testbed, testbed.layout.logs / "agent-terminating-retry.log", config=config)
    try:
        yield running
    finally:
        for pid in _stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


def shim_of(sandbox_id: str) -> int:
    """The PID of the containerd shim serving the sandbox (started with `-id <sandbox id>`)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and sandbox_id.encode() in argv:
            found.append(int(entry.name))
    assert len(found) == 1, f"shims of sandbox {sandbox_id}: {found}"
    return found[0]


async def leftovers(cri: CRIClient, uid: str) -> list[str]:
    """What containerd still holds of the pod, in any state."""
    containers = [c for c in await cri.runtime.list_containers() if c.labels.get(UID_LABEL) == uid]
    sandboxes = [s for s in await cri.runtime.list_pod_sandbox() if s.labels.get(UID_LABEL) == uid]
    return [f"container {c.id[:12]} state={c.state}" for c in containers] + [
        f"sandbox {s.id[:12]} state={s.state}" for s in sandboxes
    ]


async def test_a_failed_termination_of_a_pod_gone_from_the_apiserver_is_retried(
    settings: Settings, admin: KubeClient, cri_client: CRIClient, agent: Agent
) -> None:
    await wait_node_ready(admin, agent, settings.node_name)
    name = f"retry-{uuid.uuid4().hex[:6]}"
    container = {
        "name": "main",
        "image": configs.busybox_image(settings),
        "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
    }
    body = one_container_pod(name, container, {"test": "terminating-retry"}, terminationGracePeriodSeconds=2)
    await admin.create(paths.pods(NS), body)
    pod = await wait_running(admin, agent, name, "main")
    uid = str(pod["metadata"]["uid"])
    [sandbox] = [s for s in await cri_client.runtime.list_pod_sandbox() if s.labels.get(UID_LABEL) == uid]
    shim = shim_of(sandbox.id)
    failed = FAILED.format(ref=f"{NS}/{name}")

    def failures() -> int:
        return agent.log.read_text(errors="replace").count(failed)

    os.kill(shim, signal.SIGSTOP)
    _stopped.append(shim)
    try:
        await admin.delete(paths.pod(NS, name))  # the pod's grace, 2 s

        async def first_failure() -> bool:
            return failures() >= 1

        await eventually(first_failure, timeout=30, what="the termination failed (DEADLINE_EXCEEDED)", agent=agent)
        # A runtime stop call failed. Which code depends on the side whose deadline ends first: our client's
        # (DEADLINE_EXCEEDED), or containerd's own context around its call to the stopped shim, which comes back as
        # UNKNOWN (UnknownCRIError in the clean-clone CI run at 556e353).
        after = agent.log.read_text(errors="replace").split(failed, 1)[1][:10000]
        assert re.search(r"RuntimeService/Stop(Container|PodSandbox): (DEADLINE_EXCEEDED|UNKNOWN)", after), after
        seen = failures()
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, name), grace_period_seconds=0)  # force-deleted: it leaves the config

        # Two more failed attempts after the removal: the kill it brought (which may wait behind an attempt already
        # under way), and at least one after that. Before the fix there was none after the kill: the worker waited
        # for an update that a pod gone from the apiserver never gets.
        async def tried_again() -> bool:
            return failures() >= seen + 2

        await eventually(tried_again, timeout=30, what="the removed pod's termination tried again", agent=agent)
        assert await leftovers(cri_client, uid), "the pod was cleaned up while its shim was stopped"
    finally:
        os.kill(shim, signal.SIGCONT)
        _stopped.remove(shim)

    async def clean() -> bool:
        return not await leftovers(cri_client, uid)

    try:
        await eventually(
            clean,
            timeout=CLEANED_WITHIN,
            what=f"{name}: nothing left in containerd after the shim continued",
            agent=agent,
        )
    except AssertionError as exc:
        raise AssertionError(f"left in containerd: {await leftovers(cri_client, uid)}\n{exc}") from None
