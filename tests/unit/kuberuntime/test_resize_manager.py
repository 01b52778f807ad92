"""In-place resize through RuntimeManager.sync_pod (upstream doPodResizeAction) against a scripted CRI runtime on a
real socket and a recording pod cgroup manager: the pod cgroup grows before the containers and shrinks after them,
the actuated record follows only what the runtime accepted, a failure is the resize's error, and a memory limit is
never set below what is in use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.kuberuntime.actions import ContainerState, ContainerStatus, RuntimePodStatus, SandboxState, SandboxStatus
from nodeagent.kuberuntime.cgroups import PodResourceConfig
from nodeagent.kuberuntime.hashing import hash_container
from nodeagent.kuberuntime.manager import NodeContext, RuntimeManager
from nodeagent.kuberuntime.qos_cgroups import QOSCgroups
from tests.unit.cri.scripted import Fail, ScriptedRuntime

Obj = dict[str, Any]
MI = 1024 * 1024


class Cgroups:
    def __init__(self, log: list[str], current: PodResourceConfig, usage: int = 0) -> None:
        self.log, self.current, self.usage = log, current, usage

    def ensure(self, cgroup: str, config: PodResourceConfig) -> None:
        self.log.append(f"ensure {cgroup}")

    def read(self, cgroup: str) -> PodResourceConfig:
        return self.current

    def write(self, cgroup: str, config: PodResourceConfig) -> None:
        fields = {k: v for k, v in vars(config).items() if v is not None}
        self.log.append("pod " + " ".join(f"{k}={v}" for k, v in sorted(fields.items())))

    def memory_usage(self, cgroup: str) -> int:
        return self.usage


class Record:
    def __init__(self, actuated: Obj) -> None:
        self.actuated = {"main": actuated}

    def get_actuated(self, uid: str, name: str) -> Obj | None:
        return self.actuated.get(name)

    def set_actuated(self, uid: str, name: str, resources: Any) -> None:
        self.actuated[name] = dict(resources)


def _pod(resources: Obj) -> Obj:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u1",
            "annotations": {"kubernetes.io/config.source": "api"},
        },
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": resources}]},
    }


def _status(pod: Obj) -> RuntimePodStatus:
    spec = pod["spec"]["containers"][0]
    sandbox = SandboxStatus(id="s1", state=SandboxState.READY, created_at=1, ip="198.18.0.2", host_network=False)
    running = ContainerStatus(id="c1", name="main", state=ContainerState.RUNNING, hash=hash_container(spec))
    return RuntimePodStatus(uid="u1", name="p", namespace="ns", sandboxes=(sandbox,), containers=(running,))


def _cpu(limit: str) -> Obj:
    return {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": limit, "memory": "64Mi"}}


def _script_updates(runtime: ScriptedRuntime, log: list[str]) -> None:
    async def update(request: Any) -> api_pb2.UpdateContainerResourcesResponse:
        log.append(f"container quota={request.linux.cpu_quota} memory={request.linux.memory_limit_in_bytes}")
        return api_pb2.UpdateContainerResourcesResponse()

    runtime.script["UpdateContainerResources"] = update


@pytest.mark.parametrize(
    ("case", "before", "after", "pod_quota_now", "expected"),
    [
        ("cpu limit up: the pod cgroup first", "200m", "300m", 20000,
         ["pod cpu_period=100000 cpu_quota=30000", "container quota=30000 memory=67108864"]),
        ("cpu limit down: the containers first", "300m", "200m", 30000,
         ["container quota=20000 memory=67108864", "pod cpu_period=100000 cpu_quota=20000"]),
    ],
)  # fmt: skip
async def test_resize_order(
    runtime: ScriptedRuntime,
    client: CRIClient,
    case: str,
    before: str,
    after: str,
    pod_quota_now: int,
    expected: list[str],
) -> None:
    log: list[str] = []
    _script_updates(runtime, log)
    current = PodResourceConfig(cpu_shares=102, cpu_quota=pod_quota_now, cpu_period=100000, memory=64 * MI)
    record = Record(_cpu(before))
    manager = RuntimeManager(
        client.runtime,
        client.image,
        NodeContext(node_name="n1", host_ip="198.18.0.1"),
        resources=record,
        pod_cgroups=Cgroups(log, current),
    )
    pod = _pod(_cpu(after))
    result = await manager.sync_pod(pod, _status(pod))
    assert log == expected, case
    assert result.resized and result.resize_error is None
    assert record.actuated["main"]["limits"] == {"cpu": after, "memory": "64Mi"}


async def test_a_refused_update_is_the_resizes_error_and_not_recorded(
    runtime: ScriptedRuntime, client: CRIClient
) -> None:
    runtime.script["UpdateContainerResources"] = Fail(grpc.StatusCode.UNKNOWN, "no such cgroup")
    current = PodResourceConfig(cpu_shares=102, cpu_quota=20000, cpu_period=100000, memory=64 * MI)
    record = Record(_cpu("200m"))
    manager = RuntimeManager(
        client.runtime,
        client.image,
        NodeContext(node_name="n1", host_ip="198.18.0.1"),
        resources=record,
        pod_cgroups=Cgroups([], current),
    )
    pod = _pod(_cpu("300m"))
    result = await manager.sync_pod(pod, _status(pod))
    assert result.resize_error == "rpc error: code = Unknown desc = no such cgroup"
    assert record.actuated["main"]["limits"]["cpu"] == "200m"


async def test_a_memory_limit_is_not_set_below_its_usage(runtime: ScriptedRuntime, client: CRIClient) -> None:
    log: list[str] = []
    _script_updates(runtime, log)
    stats = api_pb2.ContainerStatsResponse(
        stats=api_pb2.ContainerStats(memory=api_pb2.MemoryUsage(usage_bytes=api_pb2.UInt64Value(value=40 * MI)))
    )
    runtime.script["ContainerStats"] = stats
    current = PodResourceConfig(cpu_shares=102, cpu_quota=20000, cpu_period=100000, memory=64 * MI)
    manager = RuntimeManager(
        client.runtime,
        client.image,
        NodeContext(node_name="n1", host_ip="198.18.0.1"),
        resources=Record(_cpu("200m")),
        pod_cgroups=Cgroups(log, current, usage=40 * MI),
    )
    smaller = {"requests": {"cpu": "100m", "memory": "16Mi"}, "limits": {"cpu": "200m", "memory": "32Mi"}}
    pod = _pod(smaller)
    result = await manager.sync_pod(pod, _status(pod))
    assert result.resize_error == (
        "cannot decrease memory limits: [attempting to set pod memory limit (33554432) below current usage "
        '(41943040), attempting to set container "main" memory limit (33554432) below current usage (41943040)]'
    )
    assert log == []  # nothing was changed


async def test_a_guaranteed_pod_restarted_by_its_resize_policy_keeps_the_guaranteed_oom_score(
    runtime: ScriptedRuntime, client: CRIClient
) -> None:
    """e2e's `Guaranteed QoS pod, one container - increase CPU (NotRequired) & memory (RestartContainer)` reads -997
    in the restarted container (upstream GetContainerOOMScoreAdjust of the pod as allocated): the new container is
    asked for it, with the new limits, once the pod cgroup has grown; the old one is stopped with upstream's
    message, and no in-place update is sent."""
    log: list[str] = []
    _script_updates(runtime, log)
    runtime.script["PullImage"] = api_pb2.PullImageResponse(image_ref="sha256:1")  # busybox:latest: always pulled

    async def create(request: Any) -> api_pb2.CreateContainerResponse:
        resources = request.config.linux.resources
        log.append(
            f"create quota={resources.cpu_quota} shares={resources.cpu_shares} "
            f"memory={resources.memory_limit_in_bytes} oom_score_adj={resources.oom_score_adj}"
        )
        return api_pb2.CreateContainerResponse(container_id="c2")

    runtime.script["CreateContainer"] = create
    before = {"requests": {"cpu": "20m", "memory": "20Mi"}, "limits": {"cpu": "20m", "memory": "20Mi"}}
    after = {"requests": {"cpu": "25m", "memory": "25Mi"}, "limits": {"cpu": "25m", "memory": "25Mi"}}
    current = PodResourceConfig(cpu_shares=20, cpu_quota=2000, cpu_period=100000, memory=20 * MI)
    record = Record(before)
    manager = RuntimeManager(
        client.runtime,
        client.image,
        NodeContext(node_name="n1", host_ip="198.18.0.1"),
        resources=record,
        pod_cgroups=Cgroups(log, current),
    )
    pod = _pod(after)
    pod["spec"]["containers"][0]["resizePolicy"] = [
        {"resourceName": "cpu", "restartPolicy": "NotRequired"},
        {"resourceName": "memory", "restartPolicy": "RestartContainer"},
    ]
    result = await manager.sync_pod(pod, _status(pod))
    assert result.resize_error is None
    assert [call.request.container_id for call in runtime.calls_of("StopContainer")] == ["c1"]  # type: ignore[attr-defined]
    assert log == [
        f"pod memory={25 * MI}",
        "pod cpu_period=100000 cpu_quota=2500",
        "pod cpu_shares=25",
        f"create quota=2500 shares=25 memory={25 * MI} oom_score_adj=-997",
    ]
    assert record.actuated["main"] == after


async def test_the_qos_tiers_are_sized_before_a_new_pod_cgroup(
    runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path
) -> None:
    # As upstream's SyncPod: UpdateQOSCgroups, then the pod cgroup (EnsureExists), then the sandbox.
    for controller in ("cpu", "memory"):
        (tmp_path / controller).mkdir()
    log: list[str] = []
    tier = tmp_path / "cpu" / "kubepods" / "burstable" / "cpu.shares"

    class Ordered(Cgroups):
        def ensure(self, cgroup: str, config: PodResourceConfig) -> None:
            log.append(f"ensure {cgroup} tier={tier.read_text() if tier.exists() else 'absent'}")

    pod = _pod(_cpu("300m"))
    manager = RuntimeManager(
        client.runtime,
        client.image,
        NodeContext(node_name="n1", host_ip="198.18.0.1"),
        pod_cgroups=Ordered(log, PodResourceConfig()),
        qos_cgroups=QOSCgroups(lambda: [pod], root=tmp_path),
    )
    await manager.sync_pod(pod, RuntimePodStatus(uid="u1", name="p", namespace="ns", sandboxes=(), containers=()))
    assert log[0] == "ensure /kubepods/burstable/podu1 tier=102"
