"""A pod whose termination failed is tried again, as upstream's pod workers do (issue 34, seen in the soak).

In the 25-minute churn of the soak a pod's StopContainer returned DEADLINE_EXCEEDED; the pod then left the
apiserver and its sandbox, veth and address stayed for good: nothing ran its worker again, and housekeeping spared
the pod because a worker still knew it. Upstream retries in two ways, both covered here:
- a sync that failed is requeued after the pod workers' back-off (10 s plus up to half of it; completeWork), which
  the sync tick picks up for a pod its sources still have (getPodsToSync);
- housekeeping (HandlePodCleanups → SyncKnownPods) runs the worker of a pod no source has any more again with its
  last update, every 2 s until it has finished: it is the only thing left that will end that pod.

The Kubelet runs the real RuntimeManager and CRI client against the scripted CRI runtime on a real socket, so the
failure is a real gRPC DEADLINE_EXCEEDED and what the retry does is read from the calls that reached the runtime.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.clock import SystemClock
from nodeagent.kubelet import Kubelet
from nodeagent.kuberuntime.manager import NodeContext, RuntimeManager
from nodeagent.podconfig import PodConfig
from nodeagent.podconfig.storage import Operation, SourceUpdate
from nodeagent.podworkers import (
    BACKOFF_PERIOD,
    PodWorkers,
    UpdatePodOptions,
    UpdateType,
    WorkState,
    backoff_after_error,
)
from nodeagent.status.manager import StatusManager
from pleg.cache import Cache
from pleg.status import ContainerRecord, PodStatus
from tests.unit.cri.conftest import client, runtime, socket_dir
from tests.unit.cri.scripted import Fail, ScriptedRuntime
from tests.unit.fakeclock import FakeClock

__all__ = ["client", "runtime", "socket_dir"]

UID = "u-retry"
LABELS = {"io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": UID}
DEADLINE = Fail(grpc.StatusCode.DEADLINE_EXCEEDED, "context deadline exceeded")


def deleted_pod() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "web",
            "namespace": "default",
            "uid": UID,
            "deletionTimestamp": "2026-01-01T00:00:00Z",
            "deletionGracePeriodSeconds": 1,
            "annotations": {"kubernetes.io/config.source": "api"},
        },
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
        "status": {"phase": "Running"},
    }


def running() -> PodStatus:
    """The pod as the PLEG cached it before the kill: its sandbox ready, its container running."""
    container = api_pb2.ContainerStatus(
        id="c1",
        metadata=api_pb2.ContainerMetadata(name="app"),
        state=api_pb2.CONTAINER_RUNNING,
        started_at=1,
        labels={**LABELS, "io.kubernetes.container.name": "app"},
    )
    return PodStatus(
        uid=UID,
        name="web",
        namespace="default",
        sandboxes=(api_pb2.PodSandboxStatus(id="s1", state=api_pb2.SANDBOX_READY, created_at=1),),
        containers=(ContainerRecord("s1", container),),
    )


@dataclass
class FakeClient:
    deletes: list[str] = field(default_factory=list)

    async def delete(
        self, path: str, *, grace_period_seconds: int | None = None, preconditions_uid: str | None = None
    ) -> dict[str, Any]:
        self.deletes.append(path)
        return {}


@dataclass
class Node:
    kubelet: Kubelet
    clock: FakeClock
    client: FakeClient

    async def settle(self) -> None:
        for _ in range(20):
            await self.kubelet.workers.wait_idle()
            await asyncio.sleep(0)

    async def run_sync_loop(self, seconds: int) -> None:
        """The syncLoop's ticks, on the fake clock: the sync tick every second, housekeeping every two."""
        for _ in range(seconds):
            await self.clock.advance(1.0)
            await self.kubelet.handle_pod_syncs(self.kubelet.pods_due())
            if int(self.clock.t) % 2 == 0:
                await self.kubelet.handle_pod_cleanups()
            await self.settle()


def node(client: CRIClient, tmp_path: Path) -> Node:
    clock = FakeClock()
    cache = Cache()
    cache.set(UID, running(), None, clock.wall().timestamp())
    cache.update_time(clock.wall().timestamp())
    api = FakeClient()
    kubelet = Kubelet(
        node_name="n1",
        pod_config=PodConfig(["api"]),
        runtime=RuntimeManager(
            client.runtime,
            client.image,
            NodeContext(node_name="n1", host_ip="198.18.0.1", pod_log_dir_root=str(tmp_path)),
        ),
        status_manager=StatusManager(None, clock=SystemClock()),
        node=lambda: None,
        pod_cache=cache,
        client=api,  # type: ignore[arg-type]
        # The PLEG's relist of the pod: the cache is fresh past the end of the last sync (the runtime's answers
        # are scripted, so the cached status stays what it was: a retry kills again what the cache says runs).
        request_relist=lambda uid: cache.update_time(clock.wall().timestamp() + 0.5),
        monotonic=clock.monotonic,
        wall=clock.wall,
        rand=lambda: 0.0,  # the back-off without its jitter: exactly upstream's 10 s
    )
    return Node(kubelet, clock, api)


def rpcs(runtime: ScriptedRuntime, names: Sequence[str]) -> list[str]:
    return [call.rpc for call in runtime.calls if call.rpc in names]


KILL_RPCS = ("StopContainer", "StopPodSandbox", "RemoveContainer", "RemovePodSandbox")
DONE = ["StopContainer", "StopPodSandbox", "RemoveContainer", "RemovePodSandbox"]


async def test_a_failed_termination_is_retried_after_the_backoff(
    runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path
) -> None:
    """Still in its source: the sync tick retries it after the back-off, not at the next resync (60 s)."""
    n = node(client, tmp_path)
    k, pod = n.kubelet, deleted_pod()
    k.pod_config.push(SourceUpdate("api", Operation.SET, (pod,)))
    runtime.script["StopContainer"] = DEADLINE
    await k.handle_pod_updates([pod])
    # The sync tick that came with it schedules the pod's next resync (the update is still pending: one sync).
    await k.handle_pod_syncs(k.pods_due())
    await n.settle()
    assert rpcs(runtime, KILL_RPCS) == ["StopContainer"]
    assert k.workers.state(UID) is WorkState.TERMINATING
    del runtime.script["StopContainer"]  # containerd is itself again

    await n.run_sync_loop(int(BACKOFF_PERIOD) - 1)
    assert rpcs(runtime, KILL_RPCS) == ["StopContainer"], "retried before the back-off"
    await n.run_sync_loop(1)
    assert rpcs(runtime, KILL_RPCS) == ["StopContainer", *DONE]
    assert k.workers.state(UID) is WorkState.TERMINATED
    assert n.client.deletes == ["/api/v1/namespaces/default/pods/web"]

    # The final delete takes it out of its source; housekeeping then forgets its worker.
    k.pod_config.push(SourceUpdate("api", Operation.REMOVE, (pod,)))
    await k.handle_pod_removes([pod])
    await n.run_sync_loop(2)
    assert k.workers.known_uids() == []
    await k.workers.stop()


async def test_a_failed_termination_is_retried_after_the_pod_left_its_source(
    runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path
) -> None:
    """The soak's case: the termination failed, the pod left the apiserver (force-deleted), and the kill that
    removal brought failed too. Housekeeping runs the worker again until it has finished."""
    n = node(client, tmp_path)
    k, pod = n.kubelet, deleted_pod()
    k.pod_config.push(SourceUpdate("api", Operation.SET, (pod,)))
    runtime.script["StopContainer"] = DEADLINE
    await k.handle_pod_updates([pod])
    await n.settle()
    k.pod_config.push(SourceUpdate("api", Operation.REMOVE, (pod,)))
    await k.handle_pod_removes([pod])
    await n.settle()
    assert rpcs(runtime, KILL_RPCS) == ["StopContainer", "StopContainer"]
    assert k.workers.state(UID) is WorkState.TERMINATING
    del runtime.script["StopContainer"]

    await n.run_sync_loop(2)  # one housekeeping pass
    assert rpcs(runtime, KILL_RPCS) == ["StopContainer", "StopContainer", *DONE]
    assert k.workers.state(UID) is WorkState.TERMINATED
    await n.run_sync_loop(2)  # the next one forgets the finished worker
    assert k.workers.known_uids() == []
    assert k.workers.state(UID) is None
    await k.workers.stop()


# --- the pod workers alone ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("rand", "delay"), [(0.0, 10.0), (0.5, 12.5), (0.999, 14.995)])
def test_backoff_after_error(rand: float, delay: float) -> None:
    # Upstream's wait.Jitter(backOffPeriod=10 s, workerBackOffPeriodJitterFactor=0.5).
    assert backoff_after_error(lambda: rand) == pytest.approx(delay)


@dataclass
class Syncer:
    """Records the syncs; the terminating sync fails while `failing` is set."""

    calls: list[str] = field(default_factory=list)
    failing: bool = False

    async def sync_pod(self, update_type: UpdateType, pod: dict[str, Any], status: PodStatus) -> bool:
        self.calls.append("sync")
        return False

    async def sync_terminating_pod(
        self, pod: dict[str, Any], status: PodStatus, grace_period: int, kill_reason: str | None
    ) -> None:
        self.calls.append("terminating")
        if self.failing:
            raise RuntimeError("StopContainer: deadline exceeded")

    async def sync_terminated_pod(self, pod: dict[str, Any], status: PodStatus) -> None:
        self.calls.append("terminated")


def pod_of(uid: str, *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": uid, "namespace": "default", "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"containers": [{"name": "app"}]}, "status": {"phase": "Running"}}


async def workers_with(syncer: Syncer) -> tuple[PodWorkers, list[str]]:
    cache = Cache()
    cache.update_time(1.0)
    clock = iter(range(2, 1000))  # every sync ends later than the last; the relist asked for is newer still
    failed: list[str] = []
    workers = PodWorkers(
        syncer,
        pod_cache=cache,
        now=lambda: float(next(clock)),
        request_relist=lambda uid: cache.update_time(2000.0),
        on_error=lambda uid, exc: failed.append(uid),
    )
    return workers, failed


async def settle(workers: PodWorkers) -> None:
    for _ in range(20):
        await workers.wait_idle()
        await asyncio.sleep(0)


async def test_sync_known_pods() -> None:
    syncer = Syncer(failing=True)
    workers, failed = await workers_with(syncer)
    workers.update_pod(UpdatePodOptions(UpdateType.CREATE, pod_of("kept")))  # still in its source: left alone
    workers.update_pod(UpdatePodOptions(UpdateType.KILL, pod_of("failed", deleting=True)))  # its kill fails
    workers.update_pod(UpdatePodOptions(UpdateType.CREATE, pod_of("running")))  # left its source unseen
    await settle(workers)
    assert failed == ["failed"]
    assert syncer.calls.count("terminating") == 1
    syncer.calls.clear()
    syncer.failing = False

    workers.sync_known_pods({"kept"})
    await settle(workers)
    assert sorted(syncer.calls) == ["terminated", "terminated", "terminating", "terminating"]
    assert workers.state("kept") is WorkState.SYNCING
    assert workers.state("failed") is WorkState.TERMINATED
    assert workers.state("running") is WorkState.TERMINATED
    syncer.calls.clear()

    workers.sync_known_pods({"kept"})  # finished orphans are forgotten, and nothing runs again
    await settle(workers)
    assert syncer.calls == []
    assert sorted(workers.known_uids()) == ["kept"]
    await workers.stop()


async def test_a_pleg_event_for_a_pod_not_yet_added_starts_no_worker(
    runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path
) -> None:
    """The source has the pod but its ADD is still queued when a PLEG event (after a restart, the first relist's)
    is dispatched: upstream's pod manager has no such pod and the event does nothing. A sync here would run before
    admission (the CI's resize test lost a PodResizePending condition that admission backfills)."""
    n = node(client, tmp_path)
    k = n.kubelet
    pod = {**deleted_pod(), "metadata": {**deleted_pod()["metadata"], "deletionTimestamp": None}}
    k.pod_config.push(SourceUpdate("api", Operation.SET, (pod,)))
    await k.handle_pod_syncs([pod])
    await n.settle()
    assert k.workers.state(UID) is None
    assert rpcs(runtime, ("RunPodSandbox", "CreateContainer", *KILL_RPCS)) == []
