"""The runtime manager against the real containerd: pods run, re-syncs are idempotent, failures get upstream's
waiting reasons without touching other pods, and kill + remove leave nothing behind."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cri.client import CRIClient
from nodeagent.kuberuntime.actions import ContainerState, RuntimePodStatus
from nodeagent.kuberuntime.cgroups import CgroupfsPodCgroups
from nodeagent.kuberuntime.manager import NodeContext, RuntimeManager, SyncResult
from nodeagent.kuberuntime.qos_cgroups import QOSCgroups
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings

Pod = dict[str, Any]


def make_pod(name: str, image: str, command: list[str], *, restart_policy: str = "Always") -> Pod:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4())},
        "spec": {
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": image, "command": command, "imagePullPolicy": "IfNotPresent"}],
        },
    }


async def sync(manager: RuntimeManager, pod: Pod) -> tuple[SyncResult, RuntimePodStatus]:
    """One sync as a pod worker does it, deciding from a fresh status (read here directly; in the agent it comes
    from the PLEG's cache), and the runtime's status after it."""
    uid = pod["metadata"]["uid"]
    result = await manager.sync_pod(pod, await manager.get_pod_status(uid))
    return result, await manager.get_pod_status(uid)


@pytest.fixture
async def manager(cri_client: CRIClient, settings: Settings, tmp_path: Path) -> AsyncIterator[RuntimeManager]:
    events: list[tuple[str, str, str]] = []
    node = NodeContext(
        node_name=settings.node_name,
        host_ip="127.0.0.1",
        cgroup_root=configs.agent_cgroup_root(settings),
        pod_log_dir_root=str(tmp_path / "pods"),
        memory_capacity=1 << 30,
    )
    mgr = RuntimeManager(
        cri_client.runtime,
        cri_client.image,
        node,
        events=lambda pod, type_, reason, message, field_path: events.append(
            (pod["metadata"]["name"], reason, message)
        ),
    )
    mgr.recorded = events  # type: ignore[attr-defined]
    yield mgr
    for status in (await mgr.list_pods()).values():
        await mgr.kill_pod(None, status, grace_period=0)
        await mgr.remove_pod(status)


async def test_pod_runs_and_a_resync_creates_nothing_new(manager: RuntimeManager, settings: Settings) -> None:
    pod = make_pod("runs", configs.busybox_image(settings), ["sleep", "3600"])
    first, first_status = await sync(manager, pod)
    assert first.waiting == {}
    assert first.pod_ips and first.pod_ips[0].startswith(settings.pod_cidr.rsplit(".", 1)[0])
    [main] = first_status.containers
    assert main.state is ContainerState.RUNNING
    assert main.restart_count == 0
    _again, again_status = await sync(manager, pod)
    assert [c.id for c in again_status.containers] == [main.id]
    assert [s.id for s in again_status.sandboxes] == [s.id for s in first_status.sandboxes]
    adopted = (await manager.list_pods())[pod["metadata"]["uid"]]
    assert adopted.name == "runs"
    assert [c.id for c in adopted.containers] == [main.id]
    reasons = [r for n, r, _ in manager.recorded if n == "runs"]  # type: ignore[attr-defined]
    assert reasons[-2:] == ["Created", "Started"]
    # The pod's cgroup sits in the BestEffort tier under the agent's own root, and goes with the pod.
    pod_cgroup = Path("/sys/fs/cgroup/memory") / configs.agent_cgroup_root(settings).strip("/") / "kubepods"
    pod_cgroup = pod_cgroup / "besteffort" / f"pod{pod['metadata']['uid']}"
    assert pod_cgroup.is_dir()
    await manager.kill_pod(pod, again_status, grace_period=0)
    await manager.remove_pod(await manager.get_pod_status(pod["metadata"]["uid"]))
    assert not pod_cgroup.exists()


async def test_pod_pids_limit_caps_the_pod_cgroup(cri_client: CRIClient, settings: Settings, tmp_path: Path) -> None:
    # podPidsLimit as upstream's EnsureExists applies it: pids.max on the pod cgroup (cgroup v1: the pids hierarchy),
    # which the pause process and every container share. An inner shell tries to start 40 processes and dies at the
    # first fork refused; the container's PID 1 outlives it, so the pod keeps what it got.
    limit = 16
    manager = RuntimeManager(
        cri_client.runtime,
        cri_client.image,
        NodeContext(
            node_name=settings.node_name,
            host_ip="127.0.0.1",
            cgroup_root=configs.agent_cgroup_root(settings),
            pod_log_dir_root=str(tmp_path / "pods"),
        ),
        pod_cgroups=CgroupfsPodCgroups(pod_pids_limit=limit),
        qos_cgroups=QOSCgroups(lambda: [pod], cgroup_root=configs.agent_cgroup_root(settings)),
    )
    inner = "i=0; while [ $i -lt 40 ]; do sleep 3600 & i=$((i+1)); done; wait"
    pod = make_pod("pids", configs.busybox_image(settings), ["sh", "-c", f"sh -c '{inner}'; exec sleep 3600"])
    uid = pod["metadata"]["uid"]
    pod_cgroup = Path("/sys/fs/cgroup/pids") / configs.agent_cgroup_root(settings).strip("/") / "kubepods"
    pod_cgroup = pod_cgroup / "besteffort" / f"pod{uid}"
    result, _status = await sync(manager, pod)
    try:
        assert result.waiting == {}
        assert (pod_cgroup / "pids.max").read_text().strip() == str(limit)
        # The QoS tiers were sized first (upstream UpdateQOSCgroups): BestEffort and an empty Burstable at 2 shares.
        tiers = Path("/sys/fs/cgroup/cpu") / configs.agent_cgroup_root(settings).strip("/") / "kubepods"
        assert [(tiers / t / "cpu.shares").read_text().strip() for t in ("burstable", "besteffort")] == ["2", "2"]
        log = tmp_path / "pods" / f"default_pids_{uid}" / "main" / "0.log"
        for _ in range(200):
            if log.exists() and "can't fork" in log.read_text():
                break
            await asyncio.sleep(0.1)
        assert "can't fork: Resource temporarily unavailable" in log.read_text()
        # The pause process, PID 1 and the sleeps the inner shell got: never more than the limit.
        assert int((pod_cgroup / "pids.current").read_text()) <= limit
        assert int((pod_cgroup / "pids.current").read_text()) >= limit - 2
        [main] = (await manager.get_pod_status(uid)).containers
        assert main.state is ContainerState.RUNNING
    finally:
        await manager.kill_pod(pod, await manager.get_pod_status(uid), grace_period=0)
        await manager.remove_pod(await manager.get_pod_status(uid))
    assert not pod_cgroup.exists()


async def test_unknown_image_waits_with_err_image_pull_then_backoff(
    manager: RuntimeManager, settings: Settings
) -> None:
    healthy = make_pod("healthy", configs.busybox_image(settings), ["sleep", "3600"])
    broken = make_pod("broken", f"{settings.registry}/no-such-image:1", ["true"])
    await sync(manager, healthy)
    first, _first_status = await sync(manager, broken)
    assert first.waiting["main"].reason == "ErrImagePull"
    assert "no-such-image" in first.waiting["main"].message
    second, _second_status = await sync(manager, broken)
    assert second.waiting["main"].reason == "ImagePullBackOff"
    _still, still_status = await sync(manager, healthy)
    assert [c.state for c in still_status.containers] == [ContainerState.RUNNING]


async def test_crashing_container_restarts_then_backs_off(manager: RuntimeManager, settings: Settings) -> None:
    pod = make_pod("crashes", configs.busybox_image(settings), ["sh", "-c", "exit 3"])

    async def until_exited() -> None:
        for _ in range(100):
            status = await manager.get_pod_status(pod["metadata"]["uid"])
            if status.containers and status.containers[0].state is ContainerState.EXITED:
                return
            await asyncio.sleep(0.1)
        raise AssertionError("container did not exit")

    await sync(manager, pod)
    await until_exited()
    restarted, restarted_status = await sync(manager, pod)  # the first restart is immediate, as upstream
    assert restarted.waiting == {}
    assert restarted_status.containers[0].restart_count == 1
    await until_exited()
    backing_off, backing_off_status = await sync(manager, pod)
    assert backing_off.waiting["main"].reason == "CrashLoopBackOff"
    assert "back-off 10s restarting failed container=main pod=crashes_default" in backing_off.waiting["main"].message
    exited = backing_off_status.containers[0]
    assert (exited.state, exited.exit_code) == (ContainerState.EXITED, 3)


async def test_kill_and_remove_leave_nothing(
    manager: RuntimeManager, settings: Settings, cri_client: CRIClient
) -> None:
    pod = make_pod("killed", configs.busybox_image(settings), ["sleep", "3600"])
    await sync(manager, pod)
    status = await manager.get_pod_status(pod["metadata"]["uid"])
    await manager.kill_pod(pod, status, grace_period=1)
    await manager.remove_pod(status)
    after = await manager.get_pod_status(pod["metadata"]["uid"])
    assert after.sandboxes == () and after.containers == ()


async def test_pre_stop_hook_runs_before_stop_and_env_comes_from_referenced_objects(
    cri_client: CRIClient, settings: Settings, tmp_path: Path
) -> None:
    objects = {
        ("configmaps", "default", "cm"): {"data": {"GREETING": "hello"}},
        ("secrets", "default", "sec"): {"data": {"TOKEN": base64.b64encode(b"s3cret").decode()}},
    }

    async def fetch(resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        return objects.get((resource, namespace, name))

    events: list[tuple[str, str]] = []
    manager = RuntimeManager(
        cri_client.runtime,
        cri_client.image,
        NodeContext(
            node_name=settings.node_name,
            host_ip="127.0.0.1",
            cgroup_root=configs.agent_cgroup_root(settings),
            pod_log_dir_root=str(tmp_path / "pods"),
        ),
        events=lambda pod, type_, reason, message, field_path: events.append((reason, message)),
        fetch_object=fetch,
    )
    pod = make_pod("hooked", configs.busybox_image(settings), ["sh", "-c", 'echo "env $GREETING $TOKEN"; sleep 3600'])
    container = pod["spec"]["containers"][0]
    container["env"] = [
        {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "GREETING"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "TOKEN"}}},
    ]
    # The hook writes to PID 1's stdout, i.e. the container log, so the test can see that it ran.
    container["lifecycle"] = {"preStop": {"exec": {"command": ["sh", "-c", "echo prestop-ran > /proc/1/fd/1"]}}}
    result, _result_status = await sync(manager, pod)
    assert result.waiting == {}
    meta = pod["metadata"]
    log = tmp_path / "pods" / f"{meta['namespace']}_{meta['name']}_{meta['uid']}" / "main" / "0.log"
    status = await manager.get_pod_status(meta["uid"])
    await manager.kill_pod(pod, status, grace_period=5)
    text = log.read_text()
    assert "env hello s3cret" in text
    assert "prestop-ran" in text
    assert ("Killing", "Stopping container main") in events
    await manager.remove_pod(await manager.get_pod_status(meta["uid"]))


async def test_missing_config_map_is_a_create_container_config_error(
    cri_client: CRIClient, settings: Settings, tmp_path: Path
) -> None:
    async def fetch(resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    manager = RuntimeManager(
        cri_client.runtime,
        cri_client.image,
        NodeContext(
            node_name=settings.node_name,
            host_ip="127.0.0.1",
            cgroup_root=configs.agent_cgroup_root(settings),
            pod_log_dir_root=str(tmp_path / "pods"),
        ),
        fetch_object=fetch,
    )
    pod = make_pod("noconfig", configs.busybox_image(settings), ["sleep", "3600"])
    pod["spec"]["containers"][0]["env"] = [
        {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "X"}}}
    ]
    result, _result_status = await sync(manager, pod)
    assert result.waiting["main"].reason == "CreateContainerConfigError"
    assert "absent" in result.waiting["main"].message
    status = await manager.get_pod_status(pod["metadata"]["uid"])
    await manager.kill_pod(pod, status, grace_period=0)
    await manager.remove_pod(status)


async def test_init_containers_run_in_order_and_a_sidecar_keeps_running(
    manager: RuntimeManager, settings: Settings, tmp_path: Path
) -> None:
    image = configs.busybox_image(settings)
    pod = make_pod("inits", image, ["sleep", "3600"])
    pod["spec"]["initContainers"] = [
        {"name": "first", "image": image, "command": ["sh", "-c", "sleep 1"], "imagePullPolicy": "IfNotPresent"},
        {"name": "sidecar", "image": image, "command": ["sleep", "3600"], "restartPolicy": "Always",
         "imagePullPolicy": "IfNotPresent"},
    ]  # fmt: skip
    uid = pod["metadata"]["uid"]

    def states(status: Any) -> dict[str, ContainerState]:
        return {c.name: c.state for c in status.containers}

    _first, first_status = await sync(manager, pod)
    assert set(states(first_status)) == {"first"}  # nothing else starts while an init container runs
    for _ in range(100):
        _synced, synced_status = await sync(manager, pod)
        if states(synced_status).get("main") is ContainerState.RUNNING:
            break
        await asyncio.sleep(0.2)
    final = states((await sync(manager, pod))[1])
    assert final == {
        "first": ContainerState.EXITED,
        "sidecar": ContainerState.RUNNING,
        "main": ContainerState.RUNNING,
    }
    meta = pod["metadata"]
    log_dir = tmp_path / "pods" / f"{meta['namespace']}_{meta['name']}_{uid}"
    assert (log_dir / "main" / "0.log").exists()
    status = await manager.get_pod_status(uid)
    await manager.kill_pod(pod, status, grace_period=0)
    await manager.remove_pod(status)
    assert not log_dir.exists()
