"""The Kubelet's part of in-place resize: a sync runs the pod as allocated (a resize not yet allocated is not acted
on), the status carries the resize conditions and the allocated resources, a failed actuation becomes
PodResizeInProgress with reason Error, and a resize makes the PLEG inspect the pod again."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cri.v1 import api_pb2
from nodeagent.allocation import AllocationManager
from nodeagent.kubelet import Kubelet
from nodeagent.kuberuntime.actions import RuntimePodStatus, from_pod_status
from nodeagent.kuberuntime.manager import SyncResult
from nodeagent.podconfig import PodConfig
from nodeagent.podworkers import UpdateType
from pleg.cache import Cache
from pleg.status import ContainerRecord, PodStatus

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
LABELS = {"io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": "u1"}


def pod(cpu_limit: str) -> dict[str, Any]:
    resources = {"requests": {"cpu": "100m"}, "limits": {"cpu": cpu_limit}}
    return {
        "metadata": {"name": "web", "namespace": "default", "uid": "u1", "generation": 2},
        "spec": {"containers": [{"name": "app", "image": "busybox", "resources": resources}]},
        "status": {"phase": "Running"},
    }


def cached(quota: int) -> PodStatus:
    running = ContainerRecord(
        "s1",
        api_pb2.ContainerStatus(
            id="c1",
            metadata=api_pb2.ContainerMetadata(name="app"),
            state=api_pb2.CONTAINER_RUNNING,
            started_at=1,
            labels={**LABELS, "io.kubernetes.container.name": "app"},
            resources=api_pb2.ContainerResources(
                linux=api_pb2.LinuxContainerResources(cpu_shares=102, cpu_quota=quota, cpu_period=100000)
            ),
        ),
    )
    sandbox = api_pb2.PodSandboxStatus(
        id="s1", state=api_pb2.SANDBOX_READY, network=api_pb2.PodSandboxNetworkStatus(ip="198.18.0.9")
    )
    return PodStatus(
        uid="u1", name="web", namespace="default", ips=("198.18.0.9",), sandboxes=(sandbox,), containers=(running,)
    )


@dataclass
class Runtime:
    result: SyncResult
    synced: list[dict[str, Any]] = field(default_factory=list)

    async def sync_pod(self, pod: dict[str, Any], status: RuntimePodStatus, **_: Any) -> SyncResult:
        self.synced.append(pod)
        return self.result

    def runtime_status(self, status: PodStatus) -> RuntimePodStatus:
        return from_pod_status(status)


@dataclass
class Statuses:
    history: list[dict[str, Any]] = field(default_factory=list)

    def set_pod_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        self.history.append(status)

    def get_pod_status(self, uid: str) -> dict[str, Any] | None:
        return self.history[-1] if self.history else None

    def pod_status_view(self, uid: str) -> Mapping[str, Any] | None:
        return self.history[-1] if self.history else None

    def remove_orphans(self, known_uids: set[str]) -> None:
        pass


def kubelet(runtime: Runtime, statuses: Statuses, allocation: AllocationManager, reinspected: list[str]) -> Kubelet:
    return Kubelet(
        node_name="n1",
        pod_config=PodConfig(["api"]),
        runtime=runtime,  # type: ignore[arg-type]
        status_manager=statuses,
        node=lambda: None,
        pod_cache=Cache(),
        host_ips=("127.0.0.1",),
        wall=lambda: NOW,
        allocation=allocation,
        request_reinspect=reinspected.append,
    )


def allocation_of(cpu_limit: str) -> AllocationManager:
    allocation = AllocationManager(None, {"cpu": "2", "memory": "4Gi"}, wall=lambda: NOW)
    allocation.add_pod(pod(cpu_limit), lambda p: None)
    allocation.set_actuated("u1", "app", {"requests": {"cpu": "100m"}, "limits": {"cpu": cpu_limit}})
    return allocation


async def test_a_pending_resize_is_not_acted_on_and_its_condition_shows() -> None:
    allocation = allocation_of("200m")
    allocation.set_pending("u1", "Deferred", "no room", 2)
    runtime, statuses, reinspected = Runtime(SyncResult({}, ("198.18.0.9",))), Statuses(), list[str]()
    k = kubelet(runtime, statuses, allocation, reinspected)
    await k.sync_pod(UpdateType.UPDATE, pod("300m"), cached(20000))
    (synced,) = runtime.synced
    assert synced["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "200m"}
    status = statuses.history[-1]
    (app,) = status["containerStatuses"]
    assert app["resources"] == {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}
    assert app["allocatedResources"] == {"cpu": "100m"}
    pending = [c for c in status["conditions"] if c["type"] == "PodResizePending"]
    assert [(c["reason"], c["message"], c["observedGeneration"]) for c in pending] == [("Deferred", "no room", 2)]
    assert reinspected == []


async def test_the_status_shows_what_the_runtime_applied_and_a_failure_is_an_error_condition() -> None:
    allocation = allocation_of("200m")
    assert allocation.handle_resize(pod("300m"), [], lambda p, o: None)
    result = SyncResult({}, ("198.18.0.9",), changed=True, resize_error="no such cgroup", resized=True)
    runtime, statuses, reinspected = Runtime(result), Statuses(), list[str]()
    k = kubelet(runtime, statuses, allocation, reinspected)
    await k.sync_pod(UpdateType.UPDATE, pod("300m"), cached(20000))
    (app,) = statuses.history[-1]["containerStatuses"]
    # Allocated 300m, but the runtime still reports 200m: the status says 200m.
    assert app["resources"]["limits"] == {"cpu": "200m"}
    assert reinspected == ["u1"]
    (progress,) = allocation.resize_conditions("u1")
    assert (progress["type"], progress["reason"], progress["message"]) == (
        "PodResizeInProgress",
        "Error",
        "no such cgroup",
    )
    k._wakeups.pop("u1", None)
