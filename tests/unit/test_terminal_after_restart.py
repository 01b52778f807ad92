"""A pod first seen with a final phase (after a restart): upstream's UpdatePod path for a pod "terminal in the config
source and in the runtime cache". It is never synced nor admitted; when nothing of it runs any more it goes straight
to the terminated sync, which removes a deleted pod from the API; when something still runs it is killed first.

Issue 34: an agent killed after it wrote a deleted pod's terminal status and before it deleted the pod object left
that pod in the apiserver for good, since a restarted agent dropped every terminal pod it had not seen before.
"""

from __future__ import annotations

import asyncio
import datetime
from dataclasses import dataclass, field
from typing import Any

import pytest

from cri.v1 import api_pb2
from nodeagent.clock import SystemClock
from nodeagent.kubelet import Kubelet
from nodeagent.kuberuntime.actions import RuntimePodStatus, from_pod_status
from nodeagent.podconfig import PodConfig
from nodeagent.podworkers import (
    PodWorkers,
    UpdatePodOptions,
    UpdateType,
    WorkState,
    first_state,
    runtime_terminal,
    skip_terminating,
)
from nodeagent.status.manager import StatusManager
from pleg.cache import Cache
from pleg.status import ContainerRecord, PodStatus

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
UID = "u1"
LABELS = {"io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": UID}


def pod(phase: str, *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "web",
        "namespace": "default",
        "uid": UID,
        "annotations": {"kubernetes.io/config.source": "api"},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        meta["deletionGracePeriodSeconds"] = 30
    status: dict[str, Any] = {"phase": phase}
    if phase == "Failed":
        status["containerStatuses"] = [
            {
                "name": "app",
                "image": "busybox",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {"terminated": {"exitCode": 137, "reason": "Error", "containerID": "containerd://c1"}},
                "containerID": "containerd://c1",
            }
        ]
    return {"metadata": meta, "spec": {"containers": [{"name": "app", "image": "busybox"}]}, "status": status}


def container(state: int) -> ContainerRecord:
    return ContainerRecord(
        "s1",
        api_pb2.ContainerStatus(
            id="c1",
            metadata=api_pb2.ContainerMetadata(name="app"),
            state=state,  # type: ignore[arg-type]
            started_at=1,
            finished_at=2 if state == api_pb2.CONTAINER_EXITED else 0,
            exit_code=137 if state == api_pb2.CONTAINER_EXITED else 0,
            labels={**LABELS, "io.kubernetes.container.name": "app"},
        ),
    )


def sandbox(state: int) -> api_pb2.PodSandboxStatus:
    return api_pb2.PodSandboxStatus(id="s1", state=state, created_at=1)  # type: ignore[arg-type]


def runtime(*, containers: tuple[int, ...] = (), sandboxes: tuple[int, ...] = ()) -> PodStatus:
    return PodStatus(
        uid=UID,
        name="web",
        namespace="default",
        sandboxes=tuple(sandbox(s) for s in sandboxes),
        containers=tuple(container(c) for c in containers),
    )


EXITED, RUNNING, CREATED = api_pb2.CONTAINER_EXITED, api_pb2.CONTAINER_RUNNING, api_pb2.CONTAINER_CREATED
READY, NOTREADY = api_pb2.SANDBOX_READY, api_pb2.SANDBOX_NOTREADY

# --- the decision, as tables -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "terminal"),
    [
        (runtime(), True),  # the runtime knows nothing of the pod
        (runtime(containers=(EXITED,), sandboxes=(NOTREADY,)), True),  # stopped: what the deterministic form makes
        (runtime(containers=(EXITED,)), True),
        (runtime(sandboxes=(NOTREADY,)), True),
        (runtime(containers=(CREATED,), sandboxes=(NOTREADY,)), True),  # created, never started: nothing runs
        (runtime(containers=(RUNNING,), sandboxes=(READY,)), False),
        (runtime(containers=(EXITED,), sandboxes=(READY,)), False),  # the sandbox still holds the network
        (runtime(containers=(RUNNING,), sandboxes=(NOTREADY,)), False),
        (runtime(containers=(EXITED, RUNNING), sandboxes=(NOTREADY,)), False),
    ],
)
def test_runtime_terminal(status: PodStatus, terminal: bool) -> None:
    assert runtime_terminal(status) is terminal


@pytest.mark.parametrize(
    ("phase", "state"),
    [
        ("Pending", WorkState.SYNCING),
        ("Running", WorkState.SYNCING),
        ("Unknown", WorkState.SYNCING),
        (None, WorkState.SYNCING),  # a static pod from a file has no status at all
        ("Succeeded", WorkState.TERMINATING),
        ("Failed", WorkState.TERMINATING),
    ],
)
def test_first_state(phase: str | None, state: WorkState) -> None:
    body = pod("Running")
    body["status"] = {} if phase is None else {"phase": phase}
    assert first_state(body) is state


@pytest.mark.parametrize(
    ("state", "status", "then"),
    [
        (WorkState.TERMINATING, runtime(), WorkState.TERMINATED),
        (WorkState.TERMINATING, runtime(containers=(EXITED,), sandboxes=(NOTREADY,)), WorkState.TERMINATED),
        (WorkState.TERMINATING, runtime(containers=(RUNNING,), sandboxes=(READY,)), WorkState.TERMINATING),
        (WorkState.TERMINATING, runtime(sandboxes=(READY,)), WorkState.TERMINATING),
        # A pod that is not terminal in the API syncs whatever the runtime holds.
        (WorkState.SYNCING, runtime(), WorkState.SYNCING),
        (WorkState.SYNCING, runtime(containers=(RUNNING,), sandboxes=(READY,)), WorkState.SYNCING),
    ],
)
def test_skip_terminating(state: WorkState, status: PodStatus, then: WorkState) -> None:
    assert skip_terminating(state, status) is then


# --- the pod workers ----------------------------------------------------------------------------------------------


@dataclass
class Syncer:
    calls: list[str] = field(default_factory=list)

    async def sync_pod(self, update_type: UpdateType, pod: dict[str, Any], status: PodStatus) -> bool:
        self.calls.append("sync")
        return False

    async def sync_terminating_pod(
        self, pod: dict[str, Any], status: PodStatus, grace_period: int, kill_reason: str | None
    ) -> None:
        self.calls.append("terminating")

    async def sync_terminated_pod(self, pod: dict[str, Any], status: PodStatus) -> None:
        self.calls.append("terminated")


def cache_with(status: PodStatus | None) -> Cache:
    cache = Cache()
    if status is not None:
        cache.set(UID, status, None, 0.5)
    cache.update_time(1.0)  # a relist finished: newer than a worker's first sync (its clock stays at 0)
    return cache


async def settle(workers: PodWorkers) -> None:
    for _ in range(20):
        await workers.wait_idle()
        await asyncio.sleep(0)


@pytest.mark.parametrize(
    ("phase", "status", "calls"),
    [
        ("Failed", None, ["terminated"]),
        ("Failed", runtime(containers=(EXITED,), sandboxes=(NOTREADY,)), ["terminated"]),
        ("Succeeded", runtime(containers=(EXITED,), sandboxes=(NOTREADY,)), ["terminated"]),
        ("Failed", runtime(containers=(RUNNING,), sandboxes=(READY,)), ["terminating", "terminated"]),
        ("Failed", runtime(sandboxes=(READY,)), ["terminating", "terminated"]),
        ("Running", runtime(containers=(RUNNING,), sandboxes=(READY,)), ["sync"]),
        ("Running", None, ["sync"]),
    ],
)
async def test_a_worker_first_seen_terminal(phase: str, status: PodStatus | None, calls: list[str]) -> None:
    syncer = Syncer()
    workers = PodWorkers(syncer, pod_cache=cache_with(status), now=lambda: 0.0)
    # A terminal pod deleted while the agent was down; a running one as it comes after any restart.
    workers.update_pod(UpdatePodOptions(UpdateType.CREATE, pod(phase, deleting=phase != "Running")))
    await settle(workers)
    assert syncer.calls == calls
    if phase != "Running":
        assert workers.state(UID) is WorkState.TERMINATED
        assert not workers.could_have_running_containers(UID)
    await workers.stop()


async def test_the_first_terminal_sync_waits_for_the_runtime() -> None:
    """Before the PLEG's first relist nothing is known of the runtime: the worker waits for it instead of guessing."""
    syncer = Syncer()
    cache = Cache()
    relists: list[str] = []
    workers = PodWorkers(syncer, pod_cache=cache, now=lambda: 0.0, request_relist=relists.append)
    workers.update_pod(UpdatePodOptions(UpdateType.CREATE, pod("Failed", deleting=True)))
    for _ in range(5):
        await asyncio.sleep(0)
    assert syncer.calls == []
    assert relists == [UID]
    cache.set(UID, runtime(containers=(RUNNING,), sandboxes=(READY,)), None, 1.0)
    await settle(workers)
    assert syncer.calls == ["terminating", "terminated"]
    await workers.stop()


# --- the Kubelet --------------------------------------------------------------------------------------------------


@dataclass
class FakeRuntime:
    """The runtime manager's part the terminating and terminated syncs use; records what was done."""

    calls: list[str] = field(default_factory=list)

    def runtime_status(self, status: PodStatus) -> RuntimePodStatus:
        return from_pod_status(status)

    async def kill_pod(self, pod: dict[str, Any] | None, status: RuntimePodStatus, *, grace_period: int | None) -> None:
        self.calls.append(f"kill grace={grace_period}")

    async def get_pod_status(self, uid: str) -> RuntimePodStatus:
        return from_pod_status(runtime(containers=(EXITED,), sandboxes=(NOTREADY,)))

    async def remove_pod(self, status: RuntimePodStatus) -> None:
        self.calls.append(f"remove containers={len(status.containers)} sandboxes={len(status.sandboxes)}")


@dataclass
class FakeClient:
    deletes: list[tuple[str, int | None, str | None]] = field(default_factory=list)

    async def delete(
        self, path: str, *, grace_period_seconds: int | None = None, preconditions_uid: str | None = None
    ) -> dict[str, Any]:
        self.deletes.append((path, grace_period_seconds, preconditions_uid))
        return {}


def kubelet(status: PodStatus, rt: FakeRuntime, client: FakeClient, statuses: StatusManager) -> Kubelet:
    cache = cache_with(status)
    return Kubelet(
        node_name="n1",
        pod_config=PodConfig(["api"]),
        runtime=rt,  # type: ignore[arg-type]
        status_manager=statuses,
        node=lambda: {"status": {"allocatable": {"cpu": "0", "memory": "0", "pods": "0"}}},
        pod_cache=cache,
        client=client,  # type: ignore[arg-type]
        # The PLEG's relist of the pod: the cache is fresh past the end of the last sync.
        request_relist=lambda uid: cache.update_time(NOW.timestamp() + 1),
        wall=lambda: NOW,
    )


@pytest.mark.parametrize(
    ("deleting", "status", "runtime_calls", "deleted"),
    [
        # The deterministic form of issue 34: deleted, stopped, Failed; the agent restarts.
        (
            True,
            runtime(containers=(EXITED,), sandboxes=(NOTREADY,)),
            ["remove containers=1 sandboxes=1"],
            True,
        ),
        # The same with its containers still running (the kill came before the stop): killed with the deletion's
        # grace, then removed.
        (
            True,
            runtime(containers=(RUNNING,), sandboxes=(READY,)),
            ["kill grace=30", "remove containers=1 sandboxes=1"],
            True,
        ),
        # A finished pod that nobody deleted (a completed Job) keeps its containers for its logs, and its object.
        (False, runtime(containers=(EXITED,), sandboxes=(NOTREADY,)), [], False),
    ],
)
async def test_a_terminal_pod_after_a_restart(
    deleting: bool, status: PodStatus, runtime_calls: list[str], deleted: bool
) -> None:
    # The status manager without an apiserver: it keeps statuses and refuses one that would move the pod backwards.
    rt, client, statuses = FakeRuntime(), FakeClient(), StatusManager(None, clock=SystemClock())
    # The node has no room at all: a terminal pod is not admitted, so admission cannot refuse it either.
    k = kubelet(status, rt, client, statuses)
    await k.handle_pod_additions([pod("Failed", deleting=deleting)])
    await settle(k.workers)
    assert rt.calls == runtime_calls
    assert client.deletes == ([("/api/v1/namespaces/default/pods/web", 0, UID)] if deleted else [])
    assert k.workers.state(UID) is WorkState.TERMINATED
    final = statuses.get_pod_status(UID)
    assert final is not None and final["phase"] == "Failed"
    [container_status] = final["containerStatuses"]
    assert container_status["state"]["terminated"]["exitCode"] == 137
    await k.workers.stop()
