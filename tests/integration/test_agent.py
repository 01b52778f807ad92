"""The agent as users run it (`nodeagent run`), against the real control plane, scheduler and containerd.

The agent runs as a subprocess with the testbed's node credential and config; the tests act as a user would,
through the apiserver as admin, and look at containerd through the project's CRI client.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
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
    clean_up,
    deployment_path,
    eventually,
    job_path,
    node_ready,
    start_agent,
    stop_agent,
)
from tests.integration.crifixtures import sandbox_config

Obj = dict[str, Any]


def pod_template(labels: dict[str, str], image: str, command: list[str], **spec: Any) -> Obj:
    return {
        "metadata": {"labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "automountServiceAccountToken": False,
            "containers": [{"name": "main", "image": image, "command": command}],
            **spec,
        },
    }


async def run_deployment(admin: KubeClient, agent: Agent, name: str, image: str, *, replicas: int) -> None:
    """A Deployment of `replicas` sleeping busybox pods labelled app=NAME, waited for until all are available."""
    labels = {"app": name}
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": pod_template(labels, image, ["sleep", "3600"]),
        },
    }
    await admin.create(deployment_path(), body)

    async def available() -> bool:
        dep = await admin.get(f"{deployment_path()}/{name}")
        return (dep.get("status") or {}).get("availableReplicas") == replicas

    await eventually(available, timeout=60, what=f"{replicas} replicas available", agent=agent)


async def pods_with(admin: KubeClient, selector: str) -> list[Obj]:
    listed = await admin.list(paths.pods(NS), label_selector=selector)
    items: list[Obj] = listed["items"]
    return items


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


async def test_node_registers_ready_with_labels_and_lease(agent: Agent, admin: KubeClient, settings: Settings) -> None:
    started = time.monotonic()
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=10, what="node Ready", agent=agent)
    assert time.monotonic() - started < 10
    node = await admin.get(paths.node(settings.node_name))
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == settings.node_name
    assert labels["kubernetes.io/os"] == "linux"
    assert labels["kubernetes.io/arch"] in ("amd64", "arm64")
    info = node["status"]["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://1.7.")
    assert {"cpu", "memory", "pods", "ephemeral-storage"} <= set(node["status"]["allocatable"])

    async def lease_exists() -> Obj | None:
        with contextlib.suppress(NotFound):
            return await admin.get(paths.lease("kube-node-lease", settings.node_name))
        return None

    # The status and lease loops start together; the Lease may land a moment after Ready.
    lease = await eventually(lease_exists, timeout=5, what="lease created", agent=agent)
    assert lease["spec"]["leaseDurationSeconds"] == 40
    assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]


async def test_deployment_becomes_available_and_its_deletion_empties_containerd(
    agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=10, what="node Ready", agent=agent)
    name = f"web-{uuid.uuid4().hex[:5]}"
    await run_deployment(admin, agent, name, configs.busybox_image(settings), replicas=3)
    pods = await pods_with(admin, f"app={name}")
    assert len(pods) == 3
    subnet = settings.pod_cidr.rsplit(".", 1)[0] + "."
    for pod in pods:
        assert pod["spec"]["nodeName"] == settings.node_name
        assert pod["status"]["phase"] == "Running"
        assert pod["status"]["podIP"].startswith(subnet)
        [container] = pod["status"]["containerStatuses"]
        assert container["ready"] is True
        assert container["containerID"].startswith("containerd://")
    uids = {p["metadata"]["uid"] for p in pods}

    await admin.delete(f"{deployment_path()}/{name}", propagation_policy="Foreground")
    grace = 2

    async def gone_from_containerd() -> bool:
        sandboxes = await cri_client.runtime.list_pod_sandbox()
        containers = await cri_client.runtime.list_containers()
        ours = [s for s in sandboxes if s.labels.get("io.kubernetes.pod.uid") in uids]
        ours += [c for c in containers if c.labels.get("io.kubernetes.pod.uid") in uids]
        return not ours

    # The pods are first deleted by the garbage collector; allow for it, then grace + 5 s for the agent.
    await eventually(lambda: _no_pods(admin, name), timeout=30 + grace + 5, what="pods deleted", agent=agent)
    await eventually(gone_from_containerd, timeout=grace + 5, what="containerd emptied", agent=agent)


async def _no_pods(admin: KubeClient, name: str) -> bool:
    return not await pods_with(admin, f"app={name}")


async def _job_pod(admin: KubeClient, job: str) -> Obj | None:
    pods = await pods_with(admin, f"job-name={job}")
    return pods[0] if pods else None


@pytest.mark.parametrize(
    ("command", "phase", "exit_code", "reason"),
    [
        (["sh", "-c", "echo done"], "Succeeded", 0, "Completed"),
        (["sh", "-c", "exit 7"], "Failed", 7, "Error"),
    ],
)
async def test_job_pod_reports_its_exit(
    agent: Agent,
    admin: KubeClient,
    settings: Settings,
    command: list[str],
    phase: str,
    exit_code: int,
    reason: str,
) -> None:
    name = f"job-{uuid.uuid4().hex[:5]}"
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "backoffLimit": 0,
            "template": pod_template({}, configs.busybox_image(settings), command, restartPolicy="Never"),
        },
    }
    await admin.create(job_path(), body)

    async def finished() -> Obj | None:
        pod = await _job_pod(admin, name)
        return pod if pod and pod["status"].get("phase") in ("Succeeded", "Failed") else None

    pod = await eventually(finished, timeout=60, what=f"job pod {phase}", agent=agent)
    assert pod["status"]["phase"] == phase
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == exit_code
    assert terminated["reason"] == reason
    await admin.delete(f"{job_path()}/{name}", propagation_policy="Background")


async def test_unknown_image_backs_off_while_other_pods_keep_running(
    agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    good, bad = f"good-{uuid.uuid4().hex[:5]}", f"bad-{uuid.uuid4().hex[:5]}"
    for name, image in ((good, configs.busybox_image(settings)), (bad, f"{settings.registry}/missing:never")):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}}
        pod |= pod_template({}, image, ["sleep", "3600"])
        pod["metadata"]["name"] = name
        pod["metadata"]["namespace"] = NS
        await admin.create(paths.pods(NS), pod)

    seen: set[str] = set()

    async def waiting_reasons() -> bool:
        pod = await admin.get(paths.pod(NS, bad))
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = status.get("state", {}).get("waiting") or {}
            if waiting.get("reason"):
                seen.add(waiting["reason"])
        return {"ErrImagePull", "ImagePullBackOff"} <= seen

    await eventually(waiting_reasons, timeout=60, what="ErrImagePull then ImagePullBackOff", agent=agent)

    async def good_running() -> bool:
        pod = await admin.get(paths.pod(NS, good))
        return bool((pod.get("status") or {}).get("phase") == "Running")

    await eventually(good_running, timeout=30, what="the good pod runs", agent=agent)
    events = await admin.list(paths.events(NS), field_selector=f"involvedObject.name={bad}")
    assert any(e["reason"] == "Failed" and "missing" in e["message"] for e in events["items"])
    for name in (good, bad):
        await admin.delete(paths.pod(NS, name), grace_period_seconds=0)


async def test_pod_that_does_not_fit_is_rejected(agent: Agent, admin: KubeClient, settings: Settings) -> None:
    name = f"huge-{uuid.uuid4().hex[:5]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        # Bound directly (no scheduler), as a pod the scheduler's view let through: the kubelet must refuse it.
        "spec": {
            "nodeName": settings.node_name,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "main",
                    "image": configs.busybox_image(settings),
                    "resources": {"requests": {"cpu": "1000"}},
                }
            ],
        },
    }
    await admin.create(paths.pods(NS), pod)

    async def failed() -> Obj | None:
        got = await admin.get(paths.pod(NS, name))
        return got if (got.get("status") or {}).get("phase") == "Failed" else None

    got = await eventually(failed, timeout=30, what="pod rejected", agent=agent)
    assert got["status"]["reason"] == "OutOfcpu"
    assert "Node didn't have enough resource: cpu" in got["status"]["message"]
    await admin.delete(paths.pod(NS, name), grace_period_seconds=0)


async def test_crash_loop_backs_off_10_20_40_seconds(agent: Agent, admin: KubeClient, settings: Settings) -> None:
    name = f"crash-{uuid.uuid4().hex[:5]}"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}}
    pod |= pod_template({}, configs.busybox_image(settings), ["sh", "-c", "exit 1"])
    pod["metadata"] = {"name": name, "namespace": NS}
    await admin.create(paths.pods(NS), pod)
    seen_at: dict[int, float] = {}
    reasons: set[str] = set()

    async def four_restarts() -> bool:
        got = await admin.get(paths.pod(NS, name))
        for status in (got.get("status") or {}).get("containerStatuses") or []:
            count = int(status.get("restartCount", 0))
            seen_at.setdefault(count, time.monotonic())
            reasons.add((status.get("state", {}).get("waiting") or {}).get("reason", ""))
        return 4 in seen_at

    await eventually(four_restarts, timeout=120, what="4 restarts", agent=agent)
    gaps = [seen_at[n + 1] - seen_at[n] for n in (1, 2, 3) if n in seen_at and n + 1 in seen_at]
    print(f"crash-loop restart gaps (s): {[round(g, 1) for g in gaps]}")
    assert "CrashLoopBackOff" in reasons
    assert len(gaps) == 3, seen_at
    for gap, expected in zip(gaps, (10, 20, 40), strict=True):
        assert expected * 0.75 <= gap <= expected * 1.25, (gaps, seen_at)
    await admin.delete(paths.pod(NS, name), grace_period_seconds=0)


async def test_housekeeping_kills_only_unknown_pods_with_our_labels(
    agent: Agent, settings: Settings, cri_client: CRIClient, tmp_path: Path
) -> None:
    labelled = sandbox_config("stray", tmp_path / "stray")  # carries io.kubernetes.pod.* labels, unknown to the API
    foreign = sandbox_config("foreign", tmp_path / "foreign")
    foreign.ClearField("labels")  # someone else's sandbox: no kubelet labels
    foreign.labels["owner"] = "not-the-agent"
    stray_id = await cri_client.runtime.run_pod_sandbox(labelled)
    foreign_id = await cri_client.runtime.run_pod_sandbox(foreign)
    try:

        async def stray_gone() -> bool:
            ids = {s.id for s in await cri_client.runtime.list_pod_sandbox()}
            return stray_id not in ids

        await eventually(stray_gone, timeout=15, what="stray labelled sandbox removed", agent=agent)
        ids = {s.id for s in await cri_client.runtime.list_pod_sandbox()}
        assert foreign_id in ids
    finally:
        await cri_client.runtime.stop_pod_sandbox(foreign_id)
        await cri_client.runtime.remove_pod_sandbox(foreign_id)


async def test_image_change_restarts_only_that_container(
    agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient
) -> None:
    name = f"two-{uuid.uuid4().hex[:5]}"
    image = configs.busybox_image(settings)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [
                {"name": "a", "image": image, "command": ["sleep", "3600"]},
                {"name": "b", "image": image, "command": ["sleep", "3600"]},
            ],
        },
    }
    await admin.create(paths.pods(NS), pod)

    async def statuses() -> dict[str, Obj] | None:
        got = await admin.get(paths.pod(NS, name))
        by_name = {c["name"]: c for c in (got.get("status") or {}).get("containerStatuses") or []}
        return by_name if all("running" in c.get("state", {}) for c in by_name.values()) and len(by_name) == 2 else None

    before = await eventually(statuses, timeout=30, what="both containers running", agent=agent)
    status = await cri_client.image.image_status(api_pb2.ImageSpec(image=image))
    digest_ref = f"{image.rsplit(':', 1)[0]}@{status.image.repo_digests[0].split('@', 1)[1]}"
    await admin.patch(paths.pod(NS, name), {"spec": {"containers": [{"name": "b", "image": digest_ref}]}})

    async def b_restarted() -> dict[str, Obj] | None:
        now = await statuses()
        return now if now and now["b"]["containerID"] != before["b"]["containerID"] else None

    after = await eventually(b_restarted, timeout=30, what="container b restarted", agent=agent)
    assert after["a"]["containerID"] == before["a"]["containerID"]
    assert after["a"]["restartCount"] == 0
    await admin.delete(paths.pod(NS, name), grace_period_seconds=0)


async def _runtime_counts(cri: CRIClient, uids: set[str]) -> tuple[int, int]:
    """Sandboxes and containers of these pods only: a pod an earlier test deleted may still be going away."""
    sandboxes = [s for s in await cri.runtime.list_pod_sandbox() if s.labels.get("io.kubernetes.pod.uid") in uids]
    containers = [c for c in await cri.runtime.list_containers() if c.labels.get("io.kubernetes.pod.uid") in uids]
    return len(sandboxes), len(containers)


async def test_restart_under_load_adopts_without_duplicates(
    agent: Agent, admin: KubeClient, settings: Settings, testbed: Testbed, cri_client: CRIClient
) -> None:
    name = f"steady-{uuid.uuid4().hex[:5]}"
    await run_deployment(admin, agent, name, configs.busybox_image(settings), replicas=4)
    statuses_before = {
        p["metadata"]["uid"]: p["status"]["containerStatuses"] for p in await pods_with(admin, f"app={name}")
    }
    before = await _runtime_counts(cri_client, set(statuses_before))
    assert before == (4, 4)
    stop_agent(agent)
    restarted = start_agent(testbed, agent.log)
    agent.proc = restarted.proc
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=15, what="node Ready again", agent=agent)
    await asyncio.sleep(5)  # several relists, sync ticks and a housekeeping pass
    assert await _runtime_counts(cri_client, set(statuses_before)) == before
    after = {p["metadata"]["uid"]: p["status"]["containerStatuses"] for p in await pods_with(admin, f"app={name}")}
    assert set(after) == set(statuses_before)
    for uid, statuses in after.items():
        assert [s["containerID"] for s in statuses] == [s["containerID"] for s in statuses_before[uid]]
        assert [s["restartCount"] for s in statuses] == [0]
    await admin.delete(f"{deployment_path()}/{name}", propagation_policy="Background")
    await eventually(lambda: _no_pods(admin, name), timeout=40, what="pods deleted", agent=agent)


async def test_stopped_agent_is_marked_not_ready_by_the_node_lifecycle_controller(
    agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=15, what="node Ready", agent=agent)
    lease = await admin.get(paths.lease("kube-node-lease", settings.node_name))
    first_renew = lease["spec"]["renewTime"]

    async def renewed() -> bool:
        again = await admin.get(paths.lease("kube-node-lease", settings.node_name))
        return bool(again["spec"]["renewTime"] != first_renew)

    await eventually(renewed, timeout=12, what="lease renewed within 10 +- 2 s", agent=agent)
    stop_agent(agent)

    async def not_ready() -> bool:
        node = await admin.get(paths.node(settings.node_name))
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        return bool(ready and ready[0]["status"] != "True" and ready[0]["reason"] == "NodeStatusUnknown")

    # The testbed's controller-manager runs with a 16 s node-monitor grace period.
    await eventually(not_ready, timeout=40, what="NotReady (NodeStatusUnknown)", agent=agent)
