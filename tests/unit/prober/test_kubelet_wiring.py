"""How the Kubelet uses the prober (through FakeProbeManager): readiness and started flags in the generated status,
failed liveness/startup handed to the runtime manager, workers ensured after each sync with the pod IPs, and the
order of termination (liveness and startup stop before the kill, everything goes after it)."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from cri.v1 import api_pb2
from nodeagent.kubelet import Kubelet, container_inputs
from nodeagent.kuberuntime.actions import (
    ContainerState,
    ContainerStatus,
    RuntimePodStatus,
    SandboxState,
    SandboxStatus,
    from_pod_status,
)
from nodeagent.kuberuntime.manager import SyncResult
from nodeagent.podconfig import PodConfig
from nodeagent.podconfig.storage import Operation, SourceUpdate
from nodeagent.podworkers import UpdatePodOptions, UpdateType, WorkState
from nodeagent.prober.fake import FakeProbeManager
from nodeagent.prober.results import Result
from nodeagent.prober.spec import ProbeType
from pleg.cache import Cache
from pleg.status import ContainerRecord, PodStatus
from tests.unit.prober.harness import EXEC, pod, settle

R, E = ContainerState.RUNNING, ContainerState.EXITED
SANDBOX = SandboxStatus(id="s1", state=SandboxState.READY, ip="198.18.0.9", host_network=False)


def status(*containers: tuple[str, str, ContainerState]) -> RuntimePodStatus:
    return RuntimePodStatus(
        uid="u1",
        name="pod-u1",
        namespace="default",
        sandboxes=(SANDBOX,),
        containers=tuple(ContainerStatus(id=c, name=n, state=s, started_at=1) for c, n, s in containers),
    )


_CRI_STATES = {R: api_pb2.CONTAINER_RUNNING, E: api_pb2.CONTAINER_EXITED}


def cri_status(*containers: tuple[str, str, ContainerState]) -> PodStatus:
    """The same pod as `status`, as the PLEG caches it (CRI messages), which is what the Kubelet syncs from."""
    sandbox = api_pb2.PodSandboxStatus(
        id="s1", state=api_pb2.SANDBOX_READY, network=api_pb2.PodSandboxNetworkStatus(ip=SANDBOX.ip)
    )
    return PodStatus(
        uid="u1",
        name="pod-u1",
        namespace="default",
        ips=(SANDBOX.ip,),
        sandboxes=(sandbox,),
        containers=tuple(
            ContainerRecord(
                "s1",
                api_pb2.ContainerStatus(
                    id=c, metadata=api_pb2.ContainerMetadata(name=n), state=_CRI_STATES[st], started_at=1
                ),
            )
            for c, n, st in containers
        ),
    )


@pytest.mark.parametrize(
    ("results", "state", "ready", "started"),
    [
        ({}, R, False, True),  # a readiness probe that has not said yes yet
        ({(ProbeType.READINESS, "c1"): Result.SUCCESS}, R, True, True),
        ({(ProbeType.READINESS, "c1"): Result.FAILURE}, R, False, True),
        ({(ProbeType.READINESS, "c1"): Result.SUCCESS}, E, False, False),  # only a running container is ready
    ],
)
def test_container_inputs_take_the_probers_view(
    results: dict[tuple[ProbeType, str], Result], state: ContainerState, ready: bool, started: bool
) -> None:
    p = pod(readiness=EXEC)
    fake = FakeProbeManager()
    runtime = status(("c1", "app", state), ("p1", "plain", R))
    fake.ensure_probes(p, runtime, ())
    fake.results.update(results)

    def view(name: str, cid: str, running: bool) -> Any:
        return fake.container_probe_status(p, name, cid, running=running)

    app, plain = container_inputs(p["spec"]["containers"], runtime, None, view)
    assert (app.ready, app.started) == (ready, started)
    assert (plain.ready, plain.started) == (True, True)  # no probes: ready while running
    # Without a prober, a running container is ready (as before probes existed).
    [unprobed, _] = container_inputs(p["spec"]["containers"], runtime, None)
    assert unprobed.ready is (state is R)


@dataclass
class FakeRuntime:
    status: RuntimePodStatus
    calls: list[tuple[str, Any]] = field(default_factory=list)
    kill_gate: asyncio.Event | None = None  # kill_pod returns once it is set (a grace period being waited out)

    async def sync_pod(
        self,
        pod: dict[str, Any],
        status: RuntimePodStatus,
        *,
        liveness_failed: frozenset[str],
        startup_failed: frozenset[str],
        startup_passed: frozenset[str] | None,
    ) -> SyncResult:
        assert status == self.status  # the cached status, converted, is what the sync decides from
        self.calls.append(("sync_pod", (liveness_failed, startup_failed)))
        return SyncResult({}, ("198.18.0.9",))

    async def get_pod_status(self, uid: str) -> RuntimePodStatus:
        return self.status

    def runtime_status(self, status: PodStatus) -> RuntimePodStatus:
        return from_pod_status(status)  # no exited containers here: no termination message to read

    async def kill_pod(self, pod: Any, status: RuntimePodStatus, *, grace_period: int) -> None:
        self.calls.append(("kill_pod", grace_period))
        if self.kill_gate is not None:
            await self.kill_gate.wait()

    async def list_pods(self, skip: Collection[str] = ()) -> dict[str, RuntimePodStatus]:
        return {}


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


def _kubelet(runtime: FakeRuntime, prober: FakeProbeManager, statuses: Statuses) -> Kubelet:
    return Kubelet(
        node_name="n1",
        pod_config=PodConfig(["api"]),
        runtime=runtime,  # type: ignore[arg-type]
        status_manager=statuses,
        node=lambda: None,
        pod_cache=Cache(),
        prober=prober,
        wall=lambda: datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    )


async def test_sync_pod_hands_failures_to_the_runtime_and_ensures_workers() -> None:
    p = pod(liveness=EXEC, readiness=EXEC)
    cached = cri_status(("c1", "app", R), ("p1", "plain", R))
    runtime = FakeRuntime(from_pod_status(cached))
    prober, statuses = FakeProbeManager(), Statuses()
    kubelet = _kubelet(runtime, prober, statuses)

    await kubelet.sync_pod(UpdateType.SYNC, p, cached)
    assert runtime.calls == [("sync_pod", (frozenset(), frozenset()))]
    assert prober.calls == [("ensure_probes", "u1")]
    generated = statuses.published["u1"]
    assert [c["ready"] for c in generated["containerStatuses"]] == [False, True]
    assert {c["type"]: c["status"] for c in generated["conditions"]}["Ready"] == "False"

    prober.set_result(ProbeType.READINESS, "c1", Result.SUCCESS)
    prober.set_result(ProbeType.LIVENESS, "c1", Result.FAILURE)
    await kubelet.sync_pod(UpdateType.SYNC, p, cached)
    assert runtime.calls[-1] == ("sync_pod", (frozenset({"c1"}), frozenset()))
    generated = statuses.published["u1"]
    assert [c["ready"] for c in generated["containerStatuses"]] == [True, True]
    assert {c["type"]: c["status"] for c in generated["conditions"]}["Ready"] == "True"


async def test_termination_stops_killing_probes_first_and_removes_all_after() -> None:
    p = pod(liveness=EXEC, readiness=EXEC)
    cached = cri_status(("c1", "app", R))
    runtime = FakeRuntime(from_pod_status(cached))
    prober, statuses = FakeProbeManager(), Statuses()
    kubelet = _kubelet(runtime, prober, statuses)
    prober.ensure_probes(p, runtime.status, ())
    order: list[str] = []
    original_kill = runtime.kill_pod

    async def kill(pod_: Any, st: RuntimePodStatus, *, grace_period: int) -> None:
        order.append(f"kill after {prober.calls[-1][0]}")
        await original_kill(pod_, st, grace_period=grace_period)

    runtime.kill_pod = kill  # type: ignore[method-assign]
    await kubelet.sync_terminating_pod(p, cached, 5, None)
    assert order == ["kill after stop_liveness_and_startup"]
    assert prober.calls[-1] == ("remove_pod", "u1")
    assert prober.results == {}


@pytest.mark.parametrize(
    ("in_config", "terminating", "kept"),
    [
        (True, False, True),
        # Removed from its source (a static manifest deleted, a force delete) but still in its grace period: readiness,
        # results and metric series stay until the worker is done, as upstream keeps the pods its workers know.
        (False, True, True),
        (False, False, False),  # known to nobody: its probes go
    ],
    ids=["in-config", "left-its-source-while-terminating", "gone"],
)
async def test_housekeeping_keeps_the_probes_of_pods_still_terminating(
    in_config: bool, terminating: bool, kept: bool
) -> None:
    p = pod(readiness=EXEC)
    cached = cri_status(("c1", "app", R))
    runtime = FakeRuntime(from_pod_status(cached), kill_gate=asyncio.Event())
    prober, statuses = FakeProbeManager(), Statuses()
    kubelet = _kubelet(runtime, prober, statuses)
    assert isinstance(kubelet.pod_cache, Cache)
    kubelet.pod_cache.set("u1", cached, None, 1.0)
    if in_config:
        kubelet.pod_config.push(SourceUpdate("api", Operation.SET, (p,)))
    prober.ensure_probes(p, runtime.status, ())
    try:
        if terminating:
            kubelet.workers.update_pod(UpdatePodOptions(UpdateType.KILL, p))
            await settle()
            assert kubelet.workers.state("u1") is WorkState.TERMINATING
            assert runtime.calls == [("kill_pod", 30)]  # waiting out the grace period
        await kubelet.handle_pod_cleanups()
        assert (("u1", "app") in prober.containers) is kept
        assert (prober.results.get((ProbeType.READINESS, "c1")) is not None) is kept
    finally:
        runtime.kill_gate.set()  # type: ignore[union-attr]
        await kubelet.workers.stop()
