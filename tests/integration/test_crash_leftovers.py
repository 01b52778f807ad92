"""An agent SIGKILLed while pods start, then restarted, leaves nothing behind (issue 21).

The agent runs as a subprocess (`nodeagent run`) against the real control plane and containerd. It is killed with
SIGKILL at several points of a 20-replica Deployment's start (as soon as the pods are bound, during sandbox set-up,
and while containers are being created), and the state a crash between CreateContainer and StartContainer or during
RunPodSandbox leaves is also made deterministically, through CRI, with the agent's own config builders. After the
restart every check reads the runtime as a whole, in every state:

- containerd's full container list: exactly one container per pod, running; nothing created-but-never-started;
- containerd's full sandbox list: exactly one sandbox per pod, ready; no not-ready one;
- the API: every pod Running with restartCount 0 (a container that never ran has not restarted);
- the testbed bridge: one veth per ready sandbox; the IPAM directory: exactly the live addresses, each owned by its
  pod's sandbox.

The module runs on a testbed of its own (its own containerd, apiserver, bridge and directory), brought up before its
first test and down after its last, whatever the outcome: a kill cut into StartContainer can leave a task containerd
will not delete ("cannot delete running task ...: failed precondition") until containerd itself goes, and on the
shared session testbed that task would fail every later test that expects an empty containerd (issue 34). The
fixtures `testbed`, `settings`, `admin` and `cri_client` below shadow the session's of the same names, so the tests
read as they would on the shared one.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from cri.client import CRIClient, connect
from cri.v1 import api_pb2
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.kuberuntime.container_config import make_container_config
from nodeagent.kuberuntime.qos import pod_qos
from nodeagent.kuberuntime.sandbox_config import DNSSettings, make_sandbox_config, pod_cgroup_parent
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import (
    NS,
    Agent,
    clean_up,
    deployment_path,
    eventually,
    node_ready,
    start_agent,
    stop_agent,
)

Obj = dict[str, Any]
UID_LABEL = "io.kubernetes.pod.uid"
REPLICAS = 20
# A shell that leaves at SIGTERM, so deleting 20 pods takes no grace period.
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
STATE_NAMES = {v: k for k, v in api_pb2.ContainerState.items()}
SANDBOX_STATE_NAMES = {v: k for k, v in api_pb2.PodSandboxState.items()}


@pytest.fixture(scope="module")
def testbed() -> Iterator[Testbed]:
    """This module's own testbed; down (every process, shim, mount, bridge) and its directory removed even when a
    test failed. NODEAGENT_KEEP_TESTBED keeps the directory (logs) as for the session's."""
    root = Path(tempfile.mkdtemp(prefix="nodeagent-crash-", dir=os.environ.get("NODEAGENT_TEST_DIR")))
    bed = Testbed(root)
    try:  # one `finally` for every way out, a pytest-timeout in `up` (a BaseException) among them
        try:
            asyncio.run(bed.up())
        except Exception as exc:
            pytest.fail(f"the crash test's testbed did not come up: {exc}", pytrace=False)
        yield bed
    finally:
        asyncio.run(bed.down())
        if not os.environ.get("NODEAGENT_KEEP_TESTBED"):
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def settings(testbed: Testbed) -> Settings:
    return testbed.settings


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def admin(testbed: Testbed) -> AsyncIterator[KubeClient]:
    async with KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as client:
        yield client


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def cri_client(testbed: Testbed) -> AsyncIterator[CRIClient]:
    async with connect(f"unix://{testbed.layout.containerd_socket}", timeout=60.0) as client:
        yield client


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    asyncio.run(clean_up(testbed, settings))  # an empty node: the checks below read the whole runtime
    running = start_agent(testbed, testbed.layout.logs / "agent-crash.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


def sigkill(agent: Agent) -> None:
    agent.proc.kill()
    agent.proc.wait(10)


def restart(agent: Agent, testbed: Testbed) -> None:
    stop_agent(agent)
    agent.proc = start_agent(testbed, agent.log).proc


def pod_spec(image: str) -> Obj:
    return {
        "terminationGracePeriodSeconds": 2,
        "automountServiceAccountToken": False,
        "containers": [{"name": "main", "image": image, "command": COMMAND}],
    }


# --- what the runtime and the network hold ---------------------------------------------------------------------


def veths(bridge: str) -> list[str]:
    if not Path("/sys/class/net", bridge).exists():
        return []  # the plugin makes the bridge at its first ADD
    out = subprocess.run(
        ["ip", "-o", "link", "show", "master", bridge], capture_output=True, text=True, check=True
    ).stdout
    return [line.split(":", 2)[1].strip().split("@", 1)[0] for line in out.splitlines() if line.strip()]


def ipam_addresses(testbed: Testbed, settings: Settings) -> dict[str, str]:
    """Address → owning container (sandbox) ID, from the plugin's files (cni/ipam.py: one file per address)."""
    directory = testbed.layout.cni_data_dir / f"nodeagent-{settings.bridge}"
    found: dict[str, str] = {}
    for name in os.listdir(directory) if directory.exists() else []:
        with contextlib.suppress(ValueError, FileNotFoundError):  # FileNotFoundError: released meanwhile
            ipaddress.IPv4Address(name)
            found[name] = next(iter((directory / name).read_text().splitlines()), "").strip()
    return found


_STUCK = re.compile(r"(?:containerd keeps its task id|sandbox kept for an unremovable container sandbox)=([0-9a-f]+)")


def containerd_stuck(testbed: Testbed) -> set[str]:
    """ID prefixes of what containerd will not let go of, as the agent logged them: a StartContainer cut off by the
    kill can leave a task containerd never marks started, and no CRI call deletes it (RemoveContainer refuses while a
    task exists). The agent kills its processes and goes on without it; these records are containerd's to keep."""
    found: set[str] = set()
    for log_file in testbed.layout.logs.glob("agent*.log"):
        found.update(_STUCK.findall(log_file.read_text(errors="replace")))
    return found


async def pod_records(cri: CRIClient, testbed: Testbed) -> list[str]:
    """The pods' containers and sandboxes containerd still lists, but for those the agent logged as containerd's to
    keep (`containerd_stuck`; `problems` passes over them alike, and `testbed down` ends them)."""
    stuck = await asyncio.to_thread(containerd_stuck, testbed)
    out = [
        f"container {c.id[:12]} ({c.metadata.name}) {STATE_NAMES[c.state]}"
        for c in await cri.runtime.list_containers()
        if c.labels.get(UID_LABEL) and c.id[:12] not in stuck
    ]
    out += [
        f"sandbox {s.id[:12]} ({s.metadata.name}) {SANDBOX_STATE_NAMES[s.state]}"
        for s in await cri.runtime.list_pod_sandbox()
        if s.labels.get(UID_LABEL) and s.id[:12] not in stuck
    ]
    return out


async def emptied(listing: Callable[[], Awaitable[list[str]]], *, timeout: float, what: str, agent: Agent) -> None:
    """`listing` is empty within the timeout; else fail naming what is left."""
    left: list[str] = []

    async def empty() -> bool:
        nonlocal left
        left = await listing()
        return not left

    with contextlib.suppress(AssertionError):
        await eventually(empty, timeout=timeout, what=what, agent=agent)
    assert left == [], f"{what}: still there after {timeout:.0f}s: {left}\n--- agent log ---\n{agent.tail()}"


async def problems(
    cri: CRIClient, admin: KubeClient, testbed: Testbed, settings: Settings, uids: set[str]
) -> list[str]:
    """Everything that differs from a clean node running exactly these pods; empty when clean."""
    out: list[str] = []
    stuck = await asyncio.to_thread(containerd_stuck, testbed)
    stuck_pods = set()
    containers = []
    for c in await cri.runtime.list_containers():  # no filter: every state
        if c.id[:12] in stuck:
            stuck_pods.add(c.labels.get(UID_LABEL))
            continue
        containers.append(c)
    sandboxes = [s for s in await cri.runtime.list_pod_sandbox() if s.id[:12] not in stuck]
    for c in containers:
        if c.state != api_pb2.CONTAINER_RUNNING:
            out.append(f"container {c.id[:12]} ({c.metadata.name}) is {STATE_NAMES[c.state]}")
    for s in sandboxes:
        if s.state != api_pb2.SANDBOX_READY:
            out.append(f"sandbox {s.id[:12]} ({s.metadata.name} attempt {s.metadata.attempt}) is NOTREADY")
    for uid in uids:
        mine = [c for c in containers if c.labels.get(UID_LABEL) == uid]
        if len(mine) != 1:
            out.append(f"pod {uid}: {len(mine)} containers {[STATE_NAMES[c.state] for c in mine]}")
        boxes = [s for s in sandboxes if s.labels.get(UID_LABEL) == uid]
        if len(boxes) != 1:
            out.append(f"pod {uid}: {len(boxes)} sandboxes {[SANDBOX_STATE_NAMES[s.state] for s in boxes]}")
    strangers = {s.labels.get(UID_LABEL) for s in sandboxes} | {c.labels.get(UID_LABEL) for c in containers}
    if strangers - uids:
        out.append(f"runtime objects of other pods: {sorted(str(u) for u in strangers - uids)}")
    listed = (await admin.list(paths.pods(NS)))["items"]
    pods = {p["metadata"]["uid"]: p for p in listed if p["metadata"]["uid"] in uids}
    ready_ips: dict[str, str] = {}
    for uid in uids:
        pod = pods.get(uid)
        if pod is None:
            out.append(f"pod {uid} is not in the API")
            continue
        st = pod.get("status") or {}
        if st.get("phase") != "Running":
            out.append(f"pod {pod['metadata']['name']} is {st.get('phase')}")
        for cs in st.get("containerStatuses") or []:
            # A successor of an unremovable instance takes the next attempt's name, so its count is 1 (as upstream).
            if cs.get("restartCount") != (1 if uid in stuck_pods else 0):
                out.append(
                    f"pod {pod['metadata']['name']} container {cs['name']} restartCount {cs.get('restartCount')}"
                )
            if "running" not in (cs.get("state") or {}):
                out.append(f"pod {pod['metadata']['name']} container {cs['name']} state {cs.get('state')}")
        boxes = [s for s in sandboxes if s.labels.get(UID_LABEL) == uid and s.state == api_pb2.SANDBOX_READY]
        if boxes and st.get("podIP"):
            ready_ips[st["podIP"]] = boxes[0].id
    links = veths(settings.bridge)
    if len(links) != len(uids):
        out.append(f"{len(links)} veths on {settings.bridge} for {len(uids)} pods")
    addresses = ipam_addresses(testbed, settings)
    if addresses != ready_ips:
        out.append(f"IPAM holds {sorted(addresses)} for the pods' {sorted(ready_ips)}")
    return out


async def converge(
    cri: CRIClient, admin: KubeClient, testbed: Testbed, settings: Settings, uids: set[str], agent: Agent
) -> None:
    """Clean within the timeout, and still clean a few seconds later (nothing recreated or left to go)."""
    last: list[str] = []

    async def clean() -> bool:
        nonlocal last
        last = await problems(cri, admin, testbed, settings, uids)
        return not last

    with contextlib.suppress(AssertionError):
        await eventually(clean, timeout=90, what="a clean node", agent=agent)
    assert last == [], f"not clean after the restart: {last}\n--- agent log ---\n{agent.tail()}"
    await asyncio.sleep(4)  # relists, syncs and a housekeeping pass
    again = await problems(cri, admin, testbed, settings, uids)
    assert again == [], f"clean, then not: {again}\n--- agent log ---\n{agent.tail()}"


# --- a 20-replica Deployment, the agent killed at several points ------------------------------------------------


async def deployment_uids(admin: KubeClient, name: str) -> set[str]:
    listed = await admin.list(paths.pods(NS), label_selector=f"app={name}")
    return {p["metadata"]["uid"] for p in listed["items"] if not p["metadata"].get("deletionTimestamp")}


async def runtime_states(cri: CRIClient, uids: set[str]) -> tuple[dict[str, int], dict[str, int]]:
    """How many of these pods' containers and sandboxes are in each state."""
    containers: dict[str, int] = {}
    sandboxes: dict[str, int] = {}
    for c in await cri.runtime.list_containers():
        if c.labels.get(UID_LABEL) in uids:
            containers[STATE_NAMES[c.state]] = containers.get(STATE_NAMES[c.state], 0) + 1
    for s in await cri.runtime.list_pod_sandbox():
        if s.labels.get(UID_LABEL) in uids:
            sandboxes[SANDBOX_STATE_NAMES[s.state]] = sandboxes.get(SANDBOX_STATE_NAMES[s.state], 0) + 1
    return containers, sandboxes


Trigger = Callable[[KubeClient, CRIClient, str], Awaitable[bool]]


async def all_bound(admin: KubeClient, cri: CRIClient, name: str) -> bool:
    del cri
    listed = await admin.list(paths.pods(NS), label_selector=f"app={name}")
    return len(listed["items"]) == REPLICAS and all(p["spec"].get("nodeName") for p in listed["items"])


def sandboxes_at_least(n: int) -> Trigger:
    async def trigger(admin: KubeClient, cri: CRIClient, name: str) -> bool:
        _, sandboxes = await runtime_states(cri, await deployment_uids(admin, name))
        return sum(sandboxes.values()) >= n

    return trigger


def a_container_created(*, running: int, fallback: int) -> Trigger:
    """As soon as a container is CREATED (between CreateContainer and StartContainer) once `running` containers run;
    at the latest once `fallback` containers exist (the window is a few milliseconds and may be missed)."""

    async def trigger(admin: KubeClient, cri: CRIClient, name: str) -> bool:
        containers, _ = await runtime_states(cri, await deployment_uids(admin, name))
        created = containers.get("CONTAINER_CREATED", 0) > 0
        return (created and containers.get("CONTAINER_RUNNING", 0) >= running) or sum(containers.values()) >= fallback

    return trigger


@pytest_asyncio.fixture(loop_scope="session")
async def deployment(admin: KubeClient, cri_client: CRIClient, agent: Agent, testbed: Testbed) -> AsyncIterator[str]:
    name = f"crash-{uuid.uuid4().hex[:5]}"
    try:
        yield name
    finally:
        if agent.proc.poll() is not None:
            restart(agent, testbed)  # a test that failed between the kill and the restart
        with contextlib.suppress(NotFound):
            await admin.delete(f"{deployment_path()}/{name}", propagation_policy="Background")

        async def left() -> list[str]:
            pods = (await admin.list(paths.pods(NS), label_selector=f"app={name}"))["items"]
            return [f"pod {p['metadata']['name']}" for p in pods] + await pod_records(cri_client, testbed)

        await emptied(left, timeout=90, what="pods deleted and containerd emptied", agent=agent)


@pytest.mark.parametrize(
    ("trigger", "delay"),
    [
        (all_bound, 0.0),  # the pods are bound: the agent is taking them in
        (all_bound, 0.7),  # sandboxes being set up (RunPodSandbox, CNI ADD)
        (sandboxes_at_least(8), 0.0),  # some sandboxes ready, more on the way
        (a_container_created(running=0, fallback=10), 0.0),  # between CreateContainer and StartContainer
        (a_container_created(running=10, fallback=19), 0.0),  # the same, half of the pods running
    ],
    ids=["bound", "bound+0.7s", "8-sandboxes", "created-early", "created-late"],
)
async def test_sigkill_during_a_20_pod_start_leaves_nothing_behind(
    agent: Agent,
    testbed: Testbed,
    admin: KubeClient,
    settings: Settings,
    cri_client: CRIClient,
    deployment: str,
    trigger: Trigger,
    delay: float,
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    labels = {"app": deployment}
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": deployment, "namespace": NS},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec(configs.busybox_image(settings))},
        },
    }
    await admin.create(deployment_path(), body)
    started = time.monotonic()
    while not await trigger(admin, cri_client, deployment):  # tight: a CREATED container lasts milliseconds
        assert time.monotonic() - started < 60, f"kill point not reached\n--- agent log ---\n{agent.tail()}"
        await asyncio.sleep(0.005)
    if delay:
        await asyncio.sleep(delay)
    sigkill(agent)
    uids = await deployment_uids(admin, deployment)
    containers, sandboxes = await runtime_states(cri_client, uids)
    print(
        f"SIGKILL {time.monotonic() - started:.2f}s after the Deployment: pods={len(uids)} containers={containers} "
        f"sandboxes={sandboxes}"
    )
    restart(agent, testbed)
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready again", agent=agent)

    async def twenty() -> bool:
        return len(await deployment_uids(admin, deployment)) == REPLICAS

    await eventually(twenty, timeout=30, what=f"{REPLICAS} pods", agent=agent)
    await converge(cri_client, admin, testbed, settings, await deployment_uids(admin, deployment), agent)


# --- the leftovers made deterministically, as a crashed agent leaves them -----------------------------------------


async def image_ref(cri: CRIClient, image: str) -> str:
    present = await cri.image.image_status(api_pb2.ImageSpec(image=image))
    if present.HasField("image") and present.image.id:
        return present.image.id
    return await cri.image.pull_image(api_pb2.ImageSpec(image=image))


async def test_created_containers_and_not_ready_sandboxes_left_by_a_crash_are_cleared(
    agent: Agent, testbed: Testbed, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    image = configs.busybox_image(settings)
    ref = await image_ref(cri_client, image)
    sigkill(agent)
    base = f"left-{uuid.uuid4().hex[:5]}"
    pods: dict[str, Obj] = {}
    try:
        for kind in ("created", "notready", "both"):
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{base}-{kind}", "namespace": NS},
                "spec": {**pod_spec(image), "nodeName": settings.node_name},  # bound while the agent is down
            }
            pods[kind] = await admin.create(paths.pods(NS), body)
        uids = {p["metadata"]["uid"] for p in pods.values()}
        dns = DNSSettings(cluster_domain="cluster.local")
        left: dict[str, str] = {}
        for kind, pod in pods.items():
            # What the agent would have sent (its own builders), up to where it was "killed".
            cgroup = pod_cgroup_parent(pod["metadata"]["uid"], pod_qos(pod), configs.agent_cgroup_root(settings))
            sandbox_config = make_sandbox_config(pod, attempt=0, cgroup_parent=cgroup, dns=dns)
            sandbox_id = await cri_client.runtime.run_pod_sandbox(sandbox_config)
            if kind in ("created", "both"):
                # Killed between CreateContainer and StartContainer.
                container = pod["spec"]["containers"][0]
                config = make_container_config(
                    pod,
                    container,
                    restart_count=0,
                    pod_ips=(),
                    node_name=settings.node_name,
                    host_ip="127.0.0.1",
                    service_env={},
                    image_ref=ref,
                    memory_capacity=0,
                    node_allocatable={},
                )
                left[kind] = await cri_client.runtime.create_container(sandbox_id, config, sandbox_config)
                # containerd opens the log file only at StartContainer: a run that never started leaves no 0.log,
                # which is why its successor counts 0 restarts (see nodeagent.kuberuntime.actions).
                log_file = Path(sandbox_config.log_directory) / config.log_path
                assert not log_file.exists(), f"{log_file} exists before StartContainer"
            if kind in ("notready", "both"):
                # A sandbox left not ready (its pause process gone, say); the stop tears its network down. containerd
                # creates no container in a stopped sandbox, so the created one above came first.
                await cri_client.runtime.stop_pod_sandbox(sandbox_id)
        before = {c.id: STATE_NAMES[c.state] for c in await cri_client.runtime.list_containers()}
        assert {before[cid] for cid in left.values()} == {"CONTAINER_CREATED"}

        restart(agent, testbed)
        await converge(cri_client, admin, testbed, settings, uids, agent)
        ids = {c.id for c in await cri_client.runtime.list_containers()}
        assert not ids & set(left.values()), "a never-started container is still there"
        for kind, pod in pods.items():
            got = await admin.get(paths.pod(NS, pod["metadata"]["name"]))
            [status] = got["status"]["containerStatuses"]
            assert status["restartCount"] == 0, (kind, status)
            log_dir = Path("/var/log/pods") / f"{NS}_{pod['metadata']['name']}_{pod['metadata']['uid']}" / "main"
            assert sorted(os.listdir(log_dir)) == ["0.log"], (kind, os.listdir(log_dir))
    finally:
        for pod in pods.values():
            with contextlib.suppress(NotFound):
                await admin.delete(paths.pod(NS, pod["metadata"]["name"]), grace_period_seconds=0)
        if agent.proc.poll() is not None:
            restart(agent, testbed)  # so the agent removes what this test made

        await emptied(lambda: pod_records(cri_client, testbed), timeout=60, what="containerd emptied", agent=agent)
