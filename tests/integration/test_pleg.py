"""Acceptance of the PLEG on the testbed, in both modes (`pleg: generic` and `pleg: evented`).

The agent runs as `nodeagent run` with a 10 s relist threshold (`plegRelistThreshold`), so the health test does not
wait 3 minutes. The tests act from outside the agent, as a user or an operator would: they kill a container's
process, stop a container with crictl, stop and start the testbed's containerd (by its PID), and look at what the
apiserver shows. Waits are on conditions with generous deadlines; nothing asserts a duration.

The first test checks the unit tests' in-memory runtime (tests/unit/pleg/fakeruntime.py) against containerd: the
same CRI calls give the same list shapes and the same container events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import crictl_path
from pleg.inspect import group_pods
from tests.cricontract import EventShape, event_shape, run_events_scenario
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
from tests.unit.pleg.fakeruntime import FakeRuntime

Obj = dict[str, Any]
MODES = ["generic", "evented"]
THRESHOLD = "10s"


# --- the fake runtime of the unit tests, checked against containerd ----------------------------------------------

Shape = EventShape


async def _scenario_on_containerd(cri: CRIClient, image: str, logs: Path) -> tuple[list[Shape], list[Any]]:
    states: list[Any] = []

    async def grouped(config: api_pb2.PodSandboxConfig) -> None:
        listed = group_pods(await cri.runtime.list_pod_sandbox(), await cri.runtime.list_containers())
        pod = listed[config.metadata.uid]
        states.append((len(pod.sandboxes), len(pod.containers), pod.name, pod.namespace))

    shapes = await run_events_scenario(cri.runtime, image, str(logs / "contract"), while_running=grouped)
    return shapes, states


async def _scenario_on_fake() -> tuple[list[Shape], list[Any]]:
    clock = iter(range(1, 1000))
    fake = FakeRuntime(lambda: next(clock))
    received: list[api_pb2.ContainerEventResponse] = []

    async def follow() -> None:
        async for event in fake.get_container_events():
            received.append(event)

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0)
    sb = fake.run_sandbox("u", "events", "nodeagent-tests")
    cid = fake.run_container(sb, "main")
    listed = group_pods(await fake.list_pod_sandbox(), await fake.list_containers())
    states = [(len(listed["u"].sandboxes), len(listed["u"].containers), listed["u"].name, listed["u"].namespace)]
    fake.exit_container(cid, 137)
    fake.remove_container(cid)
    fake.stop_sandbox(sb)
    fake.remove_sandbox(sb)
    for _ in range(5):
        await asyncio.sleep(0)
    follower.cancel()
    await asyncio.gather(follower, return_exceptions=True)
    return [event_shape(e, sb) for e in received], states


async def test_fake_runtime_matches_containerd(cri_client: CRIClient, settings: Settings, tmp_path: Path) -> None:
    image = configs.busybox_image(settings)
    await cri_client.image.pull_image(api_pb2.ImageSpec(image=image))
    real, real_states = await _scenario_on_containerd(cri_client, image, tmp_path)
    fake, fake_states = await _scenario_on_fake()
    assert real_states == fake_states == [(1, 1, "events", "nodeagent-tests")]
    print(f"container events on containerd: {real}")
    assert real == fake, f"containerd: {real}\nfake:       {fake}"


# --- the agent in each mode ----------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def running_agent(
    testbed: Testbed, settings: Settings, admin: KubeClient, mode: str, tmp_path: Path, *, log_name: str = ""
) -> AsyncIterator[Agent]:
    config = agent_config(testbed, tmp_path / "nodeagent.yaml", pleg=mode, plegRelistThreshold=THRESHOLD)
    agent = start_agent(testbed, testbed.layout.logs / f"{log_name or f'agent-pleg-{mode}'}.log", config=config)
    try:
        await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
        yield agent
    finally:
        stop_agent(agent)
        # containerd must be up for the clean-up, whatever the test left it in.
        if not any(n == "containerd" for n in testbed.running()):
            await testbed.start_containerd()
        await clean_up(testbed, settings)


def pod_body(name: str, image: str, *, restart_policy: str = "Always") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"test": "pleg"}},
        "spec": {
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [{"name": "main", "image": image, "command": ["sleep", "3600"]}],
        },
    }


async def create_running(admin: KubeClient, agent: Agent, bodies: list[Obj]) -> dict[str, Obj]:
    for body in bodies:
        await admin.create(paths.pods(NS), body)

    async def all_running() -> dict[str, Obj] | None:
        pods = {}
        for body in bodies:
            pod = await admin.get(paths.pod(NS, body["metadata"]["name"]))
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            if not statuses or "running" not in statuses[0].get("state", {}):
                return None
            pods[body["metadata"]["name"]] = pod
        return pods

    running: dict[str, Obj] = await eventually(all_running, timeout=60, what="pods running", agent=agent)
    return running


def container_id(pod: Obj) -> str:
    return str(pod["status"]["containerStatuses"][0]["containerID"]).removeprefix("containerd://")


async def container_pid(cri: CRIClient, cid: str) -> int:
    status = await cri.runtime.container_status(cid, verbose=True)
    return int(json.loads(status.info["info"])["pid"])


def main_status(pod: Obj) -> Obj:
    statuses: list[Obj] = (pod.get("status") or {}).get("containerStatuses") or []
    return statuses[0] if statuses else {}


def api_pod(admin: KubeClient, name: str) -> Callable[[], Awaitable[Obj]]:
    async def get() -> Obj:
        got: Obj = await admin.get(paths.pod(NS, name))
        return got

    return get


def logged(agent: Agent, text: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return text in agent.log.read_text(errors="replace")

    return check


@pytest.mark.parametrize("mode", MODES)
async def test_a_container_killed_from_outside_is_reported_and_restarted_per_its_policy(
    mode: str, testbed: Testbed, settings: Settings, admin: KubeClient, cri_client: CRIClient, tmp_path: Path
) -> None:
    image = configs.busybox_image(settings)
    async with running_agent(testbed, settings, admin, mode, tmp_path) as agent:
        tag = uuid.uuid4().hex[:5]
        always, never = f"always-{tag}", f"never-{tag}"
        pods = await create_running(
            admin, agent, [pod_body(always, image), pod_body(never, image, restart_policy="Never")]
        )
        first_id = container_id(pods[always])

        # Its process killed: reported with exit 137, and restarted (restartPolicy Always).
        os.kill(await container_pid(cri_client, first_id), signal.SIGKILL)

        async def restarted() -> Obj | None:
            status = main_status(await api_pod(admin, always)())
            return status if status.get("restartCount") == 1 and "running" in status.get("state", {}) else None

        status = await eventually(restarted, timeout=60, what="killed container restarted", agent=agent)
        terminated = status["lastState"]["terminated"]
        assert (terminated["exitCode"], terminated["containerID"]) == (137, f"containerd://{first_id}")
        assert container_id({"status": {"containerStatuses": [status]}}) != first_id

        # `crictl stop`: reported, not restarted (restartPolicy Never), and the pod ends Failed.
        crictl = await asyncio.create_subprocess_exec(
            str(crictl_path()),
            "stop",
            "--timeout",
            "0",
            container_id(pods[never]),
            env={**os.environ, "CONTAINER_RUNTIME_ENDPOINT": f"unix://{testbed.layout.containerd_socket}"},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await crictl.communicate()
        assert crictl.returncode == 0, output.decode(errors="replace")

        async def failed() -> Obj | None:
            pod = await api_pod(admin, never)()
            return pod if (pod.get("status") or {}).get("phase") == "Failed" else None

        pod = await eventually(failed, timeout=60, what="stopped pod Failed", agent=agent)
        stopped = main_status(pod)
        assert stopped["restartCount"] == 0
        assert stopped["state"]["terminated"]["exitCode"] in (137, 143)  # sleep ends on SIGTERM or SIGKILL


@pytest.mark.parametrize(("mode", "outage"), [("generic", "long"), ("evented", "long"), ("evented", "short")])
async def test_containerd_restart_while_pods_run(
    mode: str,
    outage: str,
    testbed: Testbed,
    settings: Settings,
    admin: KubeClient,
    cri_client: CRIClient,
    tmp_path: Path,
) -> None:
    """A long outage makes the evented PLEG fall back to relisting; a short one (containerd back before the fifth
    failed stream) does not, and the death during it must still be found, not left to the 5-minute safety relist."""
    image = configs.busybox_image(settings)
    log_name = f"agent-pleg-restart-{mode}-{outage}"
    async with running_agent(testbed, settings, admin, mode, tmp_path, log_name=log_name) as agent:
        tag = uuid.uuid4().hex[:5]
        names = [f"steady-{tag}-{i}" for i in range(2)]
        victim = f"victim-{tag}"
        pods = await create_running(admin, agent, [pod_body(n, image) for n in [*names, victim]])
        victim_id = container_id(pods[victim])
        victim_pid = await container_pid(cri_client, victim_id)
        uids = {name: pod["metadata"]["uid"] for name, pod in pods.items()}

        await testbed.stop_containerd()
        os.kill(victim_pid, signal.SIGKILL)  # dies while nobody at the runtime watches
        if mode == "evented" and outage == "long":
            await eventually(
                logged(agent, "falling back to generic relisting"), timeout=60, what="fallback", agent=agent
            )
        elif outage == "long":
            await asyncio.sleep(5)  # several relists fail meanwhile
        await testbed.start_containerd()
        if outage == "short":
            assert await logged(agent, "evented pleg stream failed")()  # the stream did see the outage

        async def victim_reported() -> Obj | None:
            status = main_status(await api_pod(admin, victim)())
            last = (status.get("lastState") or {}).get("terminated") or {}
            return status if last.get("containerID") == f"containerd://{victim_id}" else None

        status = await eventually(victim_reported, timeout=90, what="death during the outage reported", agent=agent)
        terminated = status["lastState"]["terminated"]
        print(f"death during the outage, as reported: {terminated}")
        # containerd reports the exit it finds when it starts again: 137, or 255 when the shim had lost the status.
        assert terminated["exitCode"] in (137, 255) and terminated["finishedAt"]
        await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="Ready again", agent=agent)
        if outage == "short":
            # Found by the stream's owed relist, with no fallback on the way (a slow containerd start would make
            # this a long outage: the log then says so).
            assert not await logged(agent, "falling back to generic relisting")(), agent.log.read_text()[-3000:]
        if mode == "evented":

            async def recovered() -> bool:
                text = agent.log.read_text(errors="replace")
                return text.rfind("evented pleg in use") > text.rfind("falling back to generic relisting")

            await eventually(recovered, timeout=120, what="evented pleg in use again", agent=agent)

        async def victim_running() -> bool:
            return "running" in main_status(await api_pod(admin, victim)()).get("state", {})

        await eventually(victim_running, timeout=60, what="victim restarted", agent=agent)
        for name in names:  # the other pods kept their containers
            steady = main_status(await api_pod(admin, name)())
            assert steady["containerID"] == pods[name]["status"]["containerStatuses"][0]["containerID"]
            assert steady["restartCount"] == 0 and "running" in steady["state"]
        # No duplicates: one ready sandbox and one running container per pod.
        sandboxes = await cri_client.runtime.list_pod_sandbox()
        containers = await cri_client.runtime.list_containers()
        for name, uid in uids.items():
            mine = [s for s in sandboxes if s.labels.get("io.kubernetes.pod.uid") == uid]
            running = [
                c
                for c in containers
                if c.labels.get("io.kubernetes.pod.uid") == uid and c.state == api_pb2.CONTAINER_RUNNING
            ]
            assert [s.state for s in mine] == [api_pb2.SANDBOX_READY], name
            assert len(running) == 1, name


@pytest.mark.parametrize("mode", MODES)
async def test_a_relist_that_cannot_reach_the_runtime_turns_the_node_not_ready_with_the_pleg_message(
    mode: str, testbed: Testbed, settings: Settings, admin: KubeClient, tmp_path: Path
) -> None:
    async with running_agent(testbed, settings, admin, mode, tmp_path) as agent:
        await testbed.stop_containerd()

        async def not_ready_with_pleg_message() -> str | None:
            node = await admin.get(paths.node(settings.node_name))
            ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
            message = str(ready.get("message", ""))
            pleg = "PLEG is not healthy: pleg was last seen active "
            if ready["status"] == "False" and pleg in message and f"threshold is {THRESHOLD}" in message:
                return message
            return None

        message = await eventually(not_ready_with_pleg_message, timeout=90, what="NotReady (PLEG)", agent=agent)
        print(f"Ready condition message while containerd is down: {message}")
        assert re.search(r"PLEG is not healthy: pleg was last seen active [0-9.hms]+ ago; threshold is 10s", message)
        await testbed.start_containerd()
        await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="Ready again", agent=agent)
