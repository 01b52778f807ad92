"""How the Kubelet feeds pod status generation: readiness gates read from the apiserver's view of the pod, a
status-only change that makes the gates disagree with Ready syncs the pod (HandlePodReconcile), ephemeral containers
reported from the runtime, and a terminated pod's last status settled as upstream's TerminatePod does."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from cri.v1 import api_pb2
from nodeagent.kubelet import Kubelet
from nodeagent.kuberuntime.actions import RuntimePodStatus, from_pod_status
from nodeagent.kuberuntime.manager import SyncResult
from nodeagent.podconfig import PodConfig
from nodeagent.podconfig.storage import Operation, SourceUpdate
from nodeagent.podworkers import UpdatePodOptions, UpdateType, WorkState
from nodeagent.status.container_status import UNKNOWN_WHEN_TERMINATED
from pleg.cache import Cache
from pleg.status import ContainerRecord, PodStatus

GATE = "example.com/feature-1"
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
LABELS = {
    "io.kubernetes.pod.name": "web",
    "io.kubernetes.pod.namespace": "default",
    "io.kubernetes.pod.uid": "u1",
}


def pod(conditions: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": [{"name": "app", "image": "busybox"}], **spec}
    status: dict[str, Any] = {"phase": "Running", "conditions": conditions or []}
    return {"metadata": {"name": "web", "namespace": "default", "uid": "u1"}, "spec": body, "status": status}


def running(cid: str, name: str) -> ContainerRecord:
    labels = {**LABELS, "io.kubernetes.container.name": name}
    return ContainerRecord(
        "s1",
        api_pb2.ContainerStatus(
            id=cid,
            metadata=api_pb2.ContainerMetadata(name=name),
            state=api_pb2.CONTAINER_RUNNING,
            started_at=1,
            labels=labels,
        ),
    )


def cached(*containers: ContainerRecord) -> PodStatus:
    sandbox = api_pb2.PodSandboxStatus(
        id="s1", state=api_pb2.SANDBOX_READY, network=api_pb2.PodSandboxNetworkStatus(ip="198.18.0.9")
    )
    return PodStatus(
        uid="u1", name="web", namespace="default", ips=("198.18.0.9",), sandboxes=(sandbox,), containers=containers
    )


@dataclass
class FakeRuntime:
    async def sync_pod(self, pod: dict[str, Any], status: RuntimePodStatus, **_: Any) -> SyncResult:
        return SyncResult({}, ("198.18.0.9",))

    def runtime_status(self, status: PodStatus) -> RuntimePodStatus:
        return from_pod_status(status)


@dataclass
class Statuses:
    published: dict[str, dict[str, Any]] = field(default_factory=dict)

    def set_pod_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        self.published[pod["metadata"]["uid"]] = status

    def get_pod_status(self, uid: str) -> dict[str, Any] | None:
        return self.published.get(uid)

    def pod_status_view(self, uid: str) -> Mapping[str, Any] | None:
        return self.published.get(uid)

    def remove_orphans(self, known_uids: set[str]) -> None:
        pass


@dataclass
class Workers:
    """Records what the Kubelet hands its pod workers."""

    states: dict[str, WorkState] = field(default_factory=dict)
    updates: list[tuple[UpdateType, str]] = field(default_factory=list)

    def state(self, uid: str) -> WorkState | None:
        return self.states.get(uid)

    def update_pod(self, options: UpdatePodOptions) -> None:
        self.updates.append((options.update_type, options.pod["metadata"]["uid"]))


def kubelet(statuses: Statuses, runtime_type: str = "containerd") -> Kubelet:
    k = Kubelet(
        node_name="n1",
        pod_config=PodConfig(["api"]),
        runtime=FakeRuntime(),  # type: ignore[arg-type]
        status_manager=statuses,
        node=lambda: None,
        pod_cache=Cache(),
        runtime_type=runtime_type,
        wall=lambda: NOW,
    )
    return k


def ready(status: dict[str, Any]) -> tuple[str, str | None]:
    condition = next(c for c in status["conditions"] if c["type"] == "Ready")
    return condition["status"], condition.get("message")


MISSING = f'corresponding condition of pod readiness gate "{GATE}" does not exist.'


@pytest.mark.parametrize(
    ("gate", "expected"),
    [
        (None, ("False", MISSING)),
        ("False", ("False", f'the status of pod readiness gate "{GATE}" is not "True", but False')),
        ("True", ("True", None)),
    ],
)
async def test_sync_reads_the_gates_from_the_apiservers_view(gate: str | None, expected: tuple[str, Any]) -> None:
    statuses = Statuses()
    k = kubelet(statuses)
    gates = [{"conditionType": GATE}]
    await k.sync_pod(UpdateType.SYNC, pod(readinessGates=gates), cached(running("c1", "app")))
    assert ready(statuses.published["u1"]) == ("False", MISSING)
    # A user sets the gate's condition through the apiserver: the pod config's pod shows it, the status the
    # kubelet set last (which also becomes the old status) does not.
    conditions = [] if gate is None else [{"type": GATE, "status": gate}]
    k.pod_config.push(SourceUpdate("api", Operation.SET, (pod(conditions, readinessGates=gates),)))
    await k.sync_pod(UpdateType.SYNC, pod(readinessGates=gates), cached(running("c1", "app")))
    assert ready(statuses.published["u1"]) == expected


@pytest.mark.parametrize(
    ("conditions", "state", "synced"),
    [
        pytest.param(
            [{"type": "Ready", "status": "False", "message": MISSING}, {"type": GATE, "status": "True"}],
            WorkState.SYNCING,
            True,
            id="gate turned True",
        ),
        pytest.param([{"type": "Ready", "status": "False", "message": MISSING}], WorkState.SYNCING, False, id="agrees"),
        pytest.param(
            [{"type": "Ready", "status": "True"}, {"type": GATE, "status": "False"}],
            WorkState.SYNCING,
            True,
            id="gate turned False",
        ),
        pytest.param(
            [{"type": "Ready", "status": "True"}, {"type": GATE, "status": "False"}],
            WorkState.TERMINATING,
            False,
            id="terminating: not synced for it",
        ),
        pytest.param(
            [{"type": "Ready", "status": "True"}, {"type": GATE, "status": "False"}], None, False, id="no worker"
        ),
    ],
)
async def test_reconcile_syncs_a_pod_whose_gates_disagree_with_ready(
    conditions: list[dict[str, Any]], state: WorkState | None, synced: bool
) -> None:
    k = kubelet(Statuses())
    workers = Workers({"u1": state} if state is not None else {})
    k.workers = workers  # type: ignore[assignment]
    the_pod = pod(conditions, readinessGates=[{"conditionType": GATE}])
    the_pod["status"]["containerStatuses"] = [{"name": "app", "ready": True, "state": {"running": {}}}]
    await k.handle_pod_reconcile([the_pod])
    assert workers.updates == ([(UpdateType.SYNC, "u1")] if synced else [])


async def test_reconcile_ignores_pods_without_gates() -> None:
    k = kubelet(Statuses())
    workers = Workers({"u1": WorkState.SYNCING})
    k.workers = workers  # type: ignore[assignment]
    await k.handle_pod_reconcile([pod([{"type": "Ready", "status": "False"}])])
    assert workers.updates == []


async def test_ephemeral_containers_are_reported_from_the_runtime() -> None:
    statuses = Statuses()
    k = kubelet(statuses)
    the_pod = pod(ephemeralContainers=[{"name": "debugger", "image": "busybox", "targetContainerName": "app"}])
    await k.sync_pod(UpdateType.SYNC, the_pod, cached(running("c1", "app"), running("e1", "debugger")))
    published = statuses.published["u1"]
    [debugger] = published["ephemeralContainerStatuses"]
    assert debugger["state"]["running"] is not None
    assert debugger["containerID"] == "containerd://e1"
    assert debugger["ready"] is False and "started" not in debugger
    assert [c["name"] for c in published["containerStatuses"]] == ["app"]


@pytest.mark.parametrize("runtime_type", ["containerd", "fakeRuntime"])
async def test_container_ids_are_typed_with_the_runtimes_name(runtime_type: str) -> None:
    statuses = Statuses()
    k = kubelet(statuses, runtime_type=runtime_type)
    await k.sync_pod(UpdateType.SYNC, pod(), cached(running("c1", "app")))
    [app] = statuses.published["u1"]["containerStatuses"]
    assert app["containerID"] == f"{runtime_type}://c1"


async def test_a_terminated_pod_marks_containers_without_an_end() -> None:
    statuses = Statuses()
    k = kubelet(statuses)
    await k.sync_pod(UpdateType.SYNC, pod(), cached(running("c1", "app")))
    assert statuses.published["u1"]["phase"] == "Running"
    await k.sync_terminated_pod(pod(), cached())
    published = statuses.published["u1"]
    assert published["phase"] == "Failed"
    assert published["containerStatuses"][0]["state"] == {
        "terminated": {
            "exitCode": 137,
            "reason": "ContainerStatusUnknown",
            "message": UNKNOWN_WHEN_TERMINATED,
            "startedAt": None,
            "finishedAt": None,
        }
    }
