"""The probe manager: workers start and stop with containers, startup gates the others, results reach the status
manager and the syncLoop once, adoption after an agent restart, and removal. All on a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest_asyncio

from nodeagent.prober.manager import ContainerProbeStatus, FailedProbes, ProberManager
from nodeagent.prober.prober import ProbeTarget
from nodeagent.prober.results import Result
from nodeagent.prober.spec import ProbeSpec, ProbeType
from nodeagent.syncloop import ProbeResult
from tests.unit.fakeclock import FakeClock
from tests.unit.prober.harness import EXEC, E, R, RecordingStatus, ScriptedRunner, pod, runtime, settle

S, F = Result.SUCCESS, Result.FAILURE
L, RD, ST = ProbeType.LIVENESS, ProbeType.READINESS, ProbeType.STARTUP


@dataclass
class Env:
    clock: FakeClock
    runner: ScriptedRunner
    status: RecordingStatus
    updates: asyncio.Queue[ProbeResult]
    manager: ProberManager

    @property
    def now(self) -> float:
        return self.clock.wall().timestamp()

    def drain(self) -> list[ProbeResult]:
        out = []
        while not self.updates.empty():
            out.append(self.updates.get_nowait())
        return out

    async def advance(self, seconds: float) -> None:
        await self.clock.advance(seconds)
        await settle()


@pytest_asyncio.fixture(loop_scope="session")
async def env() -> AsyncIterator[Env]:
    clock = FakeClock(start=100.0)
    runner = ScriptedRunner(clock)
    status = RecordingStatus()
    updates: asyncio.Queue[ProbeResult] = asyncio.Queue(maxsize=100)
    manager = ProberManager(
        runner,
        status=status,
        updates=updates,
        clock=clock,
        jitter=lambda period: 0.0,
        started_at=clock.wall().timestamp() - 50,
    )
    try:
        yield Env(clock, runner, status, updates, manager)
    finally:
        await manager.stop()


async def test_one_worker_per_probe_type_of_each_running_container(env: Env) -> None:
    p = pod(liveness=EXEC, readiness=EXEC)
    env.manager.ensure_probes(p, runtime("u1", ("c1", "app", R, env.now), ("p1", "plain", R, env.now)), ["198.18.0.9"])
    first = {k: env.manager.worker("u1", "app", k) for k in ProbeType}
    assert first[L] is not None and first[RD] is not None and first[ST] is None
    assert env.manager.worker_count() == 2  # the container without probes has none
    assert first[RD] is not None and first[RD].target.pod_ip == "198.18.0.9"
    # Idempotent: the same instance keeps its workers.
    env.manager.ensure_probes(p, runtime("u1", ("c1", "app", R, env.now)), ["198.18.0.9"])
    assert {k: env.manager.worker("u1", "app", k) for k in ProbeType} == first
    # Before its first verdict a container with a readiness probe is not ready; the other one is.
    assert env.manager.container_probe_status(p, "app", "c1", running=True) == ContainerProbeStatus(True, False)
    assert env.manager.container_probe_status(p, "plain", "p1", running=True) == ContainerProbeStatus(True, True)
    await env.advance(0)
    assert env.manager.container_probe_status(p, "app", "c1", running=True) == ContainerProbeStatus(True, True)
    assert env.status.calls == [("readiness", "c1", True)]
    assert env.drain() == [ProbeResult("u1", "c1", "readiness", True)]  # liveness stayed alive: nothing to say
    assert env.manager.container_probe_status(p, "app", "c1", running=False) == ContainerProbeStatus(False, False)


async def test_startup_holds_the_other_probes_back(env: Env) -> None:
    p = pod(startup={**EXEC, "failureThreshold": 5}, liveness=EXEC, readiness=EXEC)
    env.runner.script(ST, "c1", [F, F, S])
    env.runner.script(RD, "c1", [F, S])
    env.manager.ensure_probes(p, runtime("u1", ("c1", "app", R, env.now)), ["198.18.0.9"])
    assert [k for k in ProbeType if env.manager.worker("u1", "app", k)] == [ST]
    assert env.manager.container_probe_status(p, "app", "c1", running=True) == ContainerProbeStatus(False, False)
    await env.advance(0)
    await env.advance(1)
    await env.advance(1)
    # Started at the third probe: the startup worker is done, readiness and liveness probe from then on.
    assert [kind for _, kind, _ in env.runner.calls] == [ST, ST, ST, RD, L]
    assert [k for k in ProbeType if env.manager.worker("u1", "app", k)] == [L, RD]
    assert env.status.calls == [("startup", "c1", True)]
    assert env.manager.container_probe_status(p, "app", "c1", running=True) == ContainerProbeStatus(True, False)
    await env.advance(1)
    assert env.manager.container_probe_status(p, "app", "c1", running=True) == ContainerProbeStatus(True, True)
    assert ProbeResult("u1", "c1", "startup", True) in env.drain()


async def test_liveness_failure_is_reported_once_and_not_probed_again(env: Env) -> None:
    p = pod(liveness=EXEC)
    env.runner.script(L, "c1", [S, F])
    env.manager.ensure_probes(p, runtime("u1", ("c1", "app", R, env.now)), [])
    await env.advance(0)
    await env.advance(1)
    assert env.manager.failed_containers("u1") == FailedProbes(liveness=frozenset({"c1"}))
    assert env.drain() == [ProbeResult("u1", "c1", "liveness", False)]
    assert env.manager.worker("u1", "app", L) is None  # it ended at its verdict
    env.manager.ensure_probes(p, runtime("u1", ("c1", "app", R, env.now)), [])
    assert env.manager.worker("u1", "app", L) is None  # a doomed container is not probed again
    # The restarted container starts afresh: new worker, the old verdict gone.
    env.manager.ensure_probes(p, runtime("u1", ("c2", "app", R, env.now), ("c1", "app", E, env.now)), [])
    worker = env.manager.worker("u1", "app", L)
    assert worker is not None and worker.container_id == "c2"
    assert env.manager.failed_containers("u1") == FailedProbes()
    assert env.manager.results_for(L).get("c1") is None


async def test_a_stopped_container_loses_its_workers_and_results(env: Env) -> None:
    p = pod(readiness=EXEC)
    env.manager.ensure_probes(p, runtime("u1", ("c1", "app", R, env.now)), [])
    await env.advance(0)
    assert env.manager.results_for(RD).get("c1") is S
    env.manager.ensure_probes(p, runtime("u1", ("c1", "app", E, env.now)), [])
    await settle()
    assert env.manager.worker_count() == 0
    assert env.manager.results_for(RD).get("c1") is None


async def test_a_replacement_worker_waits_for_the_probe_in_flight(env: Env) -> None:
    p = pod(readiness=EXEC)
    env.runner.duration = 5
    env.manager.ensure_probes(p, runtime("u1", ("c1", "app", R, env.now)), [])
    await env.advance(0)  # c1's first probe is in flight
    env.manager.ensure_probes(p, runtime("u1", ("c2", "app", R, env.now), ("c1", "app", E, env.now)), [])
    await env.advance(1)
    assert [(kind, cid) for _, kind, cid in env.runner.calls] == [(RD, "c1"), (RD, "c2")]
    assert env.runner.most_in_flight == 1


@dataclass
class SlowToStop:
    """A probe that runs until cancelled and then keeps going until the test lets it end, as an RPC the runtime is
    slow to give up; records the containers whose probe is running."""

    release: asyncio.Event
    running: list[str]
    most: int = 0

    async def probe(self, kind: ProbeType, target: ProbeTarget, spec: ProbeSpec) -> Result | None:
        self.running.append(target.container_id)
        self.most = max(self.most, len(self.running))
        try:
            await asyncio.Event().wait()  # until cancelled
            return None
        finally:
            await self.release.wait()
            self.running.remove(target.container_id)


async def test_every_replacement_waits_for_all_runs_still_winding_down(env: Env) -> None:
    runner = SlowToStop(asyncio.Event(), [])
    manager = ProberManager(runner, clock=env.clock, jitter=lambda period: 0.0, started_at=env.now - 50)
    p = pod(readiness=EXEC)
    try:
        manager.ensure_probes(p, runtime("u1", ("c1", "app", R, env.now)), [])
        await env.advance(0)
        assert runner.running == ["c1"]
        # c1 stops while its probe is in flight: c2's worker waits for it; c2 stops too while still waiting, and c3's
        # worker must wait for c1's probe as well, not only for c2's worker (which ends at once).
        manager.ensure_probes(p, runtime("u1", ("c2", "app", R, env.now), ("c1", "app", E, env.now)), [])
        await env.advance(0)
        manager.ensure_probes(p, runtime("u1", ("c3", "app", R, env.now), ("c2", "app", E, env.now)), [])
        await env.advance(1)
        assert runner.running == ["c1"]
        runner.release.set()
        await env.advance(1)
        assert runner.running == ["c3"]
        assert runner.most == 1
    finally:
        runner.release.set()
        await manager.stop()


async def test_termination_stops_liveness_and_startup_but_not_readiness(env: Env) -> None:
    p = pod(liveness=EXEC, readiness=EXEC)
    env.manager.ensure_probes(p, runtime("u1", ("c1", "app", R, env.now)), [])
    env.manager.stop_liveness_and_startup("u1")
    await settle()
    assert [k for k in ProbeType if env.manager.worker("u1", "app", k)] == [RD]
    env.manager.ensure_probes(p, runtime("u1", ("c1", "app", R, env.now)), [])
    assert [k for k in ProbeType if env.manager.worker("u1", "app", k)] == [RD]
    # Readiness still probes during the grace period: a failure takes the pod out of its Services.
    env.runner.script(RD, "c1", [F])
    await env.advance(1)
    assert ("readiness", "c1", False) in env.status.calls


async def test_a_pod_being_deleted_gets_no_liveness_worker(env: Env) -> None:
    env.manager.ensure_probes(pod(deleting=True, liveness=EXEC, readiness=EXEC), runtime("u1", ("c1", "app", R, 0)), [])
    assert [k for k in ProbeType if env.manager.worker("u1", "app", k)] == [RD]


async def test_remove_and_cleanup(env: Env) -> None:
    for uid in ("u1", "u2", "u3"):
        env.manager.ensure_probes(pod(uid, readiness=EXEC), runtime(uid, (f"c-{uid}", "app", R, env.now)), [])
    await env.advance(0)
    series = env.manager.metrics.registry.get_sample_value
    labels = {"probe_type": "Readiness", "result": "successful", "container": "app", "namespace": "default"}
    assert series("prober_probe_total", {**labels, "pod": "pod-u1", "pod_uid": "u1"}) == 1
    env.manager.remove_pod("u1")
    env.manager.cleanup_pods({"u2"})
    await settle()
    assert [(uid, env.manager.worker(uid, "app", RD) is not None) for uid in ("u1", "u2", "u3")] == [
        ("u1", False),
        ("u2", True),
        ("u3", False),
    ]
    assert env.manager.results_for(RD).get("c-u1") is None and env.manager.results_for(RD).get("c-u2") is S
    assert series("prober_probe_total", {**labels, "pod": "pod-u1", "pod_uid": "u1"}) is None
    assert series("prober_probe_total", {**labels, "pod": "pod-u2", "pod_uid": "u2"}) == 1


async def test_a_full_channel_drops_and_counts_but_the_status_still_changes(env: Env) -> None:
    env.updates = asyncio.Queue(maxsize=1)
    manager = ProberManager(env.runner, status=env.status, updates=env.updates, clock=env.clock, jitter=lambda p: 0)
    try:
        for uid in ("u1", "u2"):
            manager.ensure_probes(pod(uid, readiness=EXEC), runtime(uid, (f"c-{uid}", "app", R, env.now)), [])
        await env.advance(0)
        assert env.updates.qsize() == 1
        assert manager.dropped_updates == 1
        assert sorted(env.status.calls) == [("readiness", "c-u1", True), ("readiness", "c-u2", True)]
    finally:
        await manager.stop()


async def test_adoption_keeps_the_reported_verdicts_of_the_same_instance(env: Env) -> None:
    reported = {
        "containerStatuses": [
            {"name": "app", "containerID": "containerd://c1", "ready": True, "started": True},
        ]
    }
    started_before_agent = env.now - 3600
    p = pod(status=reported, startup=EXEC, readiness={**EXEC, "periodSeconds": 10})
    env.manager.ensure_probes(p, runtime("u1", ("c1", "app", R, started_before_agent)), [])
    # Adopted: started and ready at once, as the API said; readiness and liveness workers, no startup worker.
    assert env.manager.container_probe_status(p, "app", "c1", running=True) == ContainerProbeStatus(True, True)
    assert [k for k in ProbeType if env.manager.worker("u1", "app", k)] == [RD]
    worker = env.manager.worker("u1", "app", RD)
    assert worker is not None and worker.adopted
    # A different instance than the one reported is not trusted.
    q = pod("u2", status=reported, startup=EXEC, readiness=EXEC)
    env.manager.ensure_probes(q, runtime("u2", ("c9", "app", R, started_before_agent)), [])
    assert env.manager.container_probe_status(q, "app", "c9", running=True) == ContainerProbeStatus(False, False)
