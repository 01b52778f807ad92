"""The probe worker's loop on a fake clock: first-probe delay, period, thresholds, and when a worker ends.

Each case runs a real ProbeWorker over a scripted runner; the clock only moves when the test advances it, so the
timing is exact and nothing sleeps.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import generate_latest

from nodeagent.prober.metrics import ProberMetrics
from nodeagent.prober.prober import ProbeTarget
from nodeagent.prober.results import Result, ResultsManager, ResultUpdate
from nodeagent.prober.spec import ExecAction, ProbeSpec, ProbeType
from nodeagent.prober.worker import ProbeWorker
from tests.unit.fakeclock import FakeClock

S, F, ERR = Result.SUCCESS, Result.FAILURE, None
POD: dict[str, Any] = {"metadata": {"name": "web", "namespace": "default", "uid": "u1"}, "spec": {}}


@dataclass
class ScriptedRunner:
    """Answers probes from a script (the last answer repeats); a probe may take `duration` clock seconds."""

    clock: FakeClock
    script: list[Result | None]
    duration: float = 0.0
    times: list[float] = field(default_factory=list)

    async def probe(self, kind: ProbeType, target: ProbeTarget, spec: ProbeSpec) -> Result | None:
        self.times.append(self.clock.t)
        if self.duration:
            await self.clock.sleep(self.duration)
        return self.script.pop(0) if len(self.script) > 1 else self.script[0]


@dataclass
class Run:
    probe_times: list[float]
    updates: list[tuple[float, Result]]
    finished: bool
    startup_callbacks: int
    worker: ProbeWorker
    metrics: ProberMetrics


async def run_worker(
    kind: ProbeType,
    spec: ProbeSpec,
    script: list[Result | None],
    *,
    until: float,
    started_ago: float = 0.0,
    adopted: bool = False,
    duration: float = 0.0,
) -> Run:
    clock = FakeClock()
    runner = ScriptedRunner(clock, script, duration)
    updates: list[tuple[float, Result]] = []

    def on_update(update: ResultUpdate, pod: dict[str, Any]) -> None:
        updates.append((clock.t, update.result))

    callbacks: list[ProbeWorker] = []
    metrics = ProberMetrics()
    target = ProbeTarget(POD, {"name": "app"}, "c1", ("198.18.0.9",), clock.wall().timestamp() - started_ago)
    worker = ProbeWorker(
        kind,
        target,
        spec,
        runner=runner,
        results=ResultsManager(kind, on_update),
        metrics=metrics,
        clock=clock,
        adopted=adopted,
        jitter=lambda period: period * 0.3,
        on_startup_succeeded=callbacks.append,
    )
    task = asyncio.create_task(worker.run())
    await clock.advance(0)
    while clock.t < until:
        await clock.advance(0.5)
    finished = task.done()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return Run(runner.times, updates, finished, len(callbacks), worker, metrics)


def spec(**overrides: Any) -> ProbeSpec:
    return ProbeSpec(ExecAction(("true",)), **overrides)


CASES = [
    # (id, kind, spec, script, until, probe times, recorded updates, finished)
    (
        "defaults: every 10 s, three failures in a row to fail",
        ProbeType.READINESS,
        spec(),
        [S, S, F, F, F],
        45,
        [0, 10, 20, 30, 40],
        [(0, S), (40, F)],
        False,
    ),
    (
        "initial delay then period",
        ProbeType.READINESS,
        spec(initial_delay_seconds=5, period_seconds=2),
        [S],
        9.5,
        [5, 7, 9],
        [(5, S)],
        False,
    ),
    (
        "success threshold 2",
        ProbeType.READINESS,
        spec(period_seconds=1, success_threshold=2),
        [F, S, S],
        3,
        [0, 1, 2, 3],
        [(2, S)],
        False,
    ),
    (
        "failure threshold 1 flips at once",
        ProbeType.READINESS,
        spec(period_seconds=1, failure_threshold=1),
        [S, F, S],
        2.5,
        [0, 1, 2],
        [(0, S), (1, F), (2, S)],
        False,
    ),
    (
        "an error is thrown away and does not break a run",
        ProbeType.READINESS,
        spec(period_seconds=1, failure_threshold=2),
        [F, ERR, F],
        3,
        [0, 1, 2, 3],
        [(2, F)],
        False,
    ),
    (
        "liveness ends at its failure",
        ProbeType.LIVENESS,
        spec(period_seconds=1, failure_threshold=2),
        [S, F, F, F],
        10,
        [0, 1, 2],
        [(0, S), (2, F)],
        True,
    ),
    (
        "startup ends at success",
        ProbeType.STARTUP,
        spec(period_seconds=2, failure_threshold=5),
        [F, F, S],
        20,
        [0, 2, 4],
        [(4, S)],
        True,
    ),
    (
        "startup ends at failure past its threshold",
        ProbeType.STARTUP,
        spec(period_seconds=2, failure_threshold=3),
        [F],
        20,
        [0, 2, 4],
        [(4, F)],
        True,
    ),
]


@pytest.mark.parametrize(
    ("kind", "spec_", "script", "until", "times", "updates", "finished"),
    [c[1:] for c in CASES],
    ids=[str(c[0]) for c in CASES],
)
async def test_worker_loop(
    kind: ProbeType,
    spec_: ProbeSpec,
    script: list[Result | None],
    until: float,
    times: list[float],
    updates: list[tuple[float, Result]],
    finished: bool,
) -> None:
    run = await run_worker(kind, spec_, script, until=until)
    assert run.probe_times == times
    assert run.updates == updates
    assert run.finished is finished


async def test_startup_success_calls_back_once_and_failure_never() -> None:
    ok = await run_worker(ProbeType.STARTUP, spec(period_seconds=1), [S], until=5)
    assert ok.startup_callbacks == 1
    failed = await run_worker(ProbeType.STARTUP, spec(period_seconds=1, failure_threshold=1), [F], until=5)
    assert failed.startup_callbacks == 0


@pytest.mark.parametrize(
    ("started_ago", "adopted", "initial_delay", "first"),
    [
        (4, False, 10, 6),  # what is left of the initial delay
        (30, False, 10, 0),  # the delay is long past: at once
        (30, True, 10, 3),  # adopted after an agent restart: plus jitter (0.3 of the 10 s period here)
        (0, True, 0, 3),
    ],
)
async def test_first_probe_delay(started_ago: float, adopted: bool, initial_delay: int, first: float) -> None:
    run = await run_worker(
        ProbeType.READINESS,
        spec(initial_delay_seconds=initial_delay),
        [S],
        until=first + 0.5,
        started_ago=started_ago,
        adopted=adopted,
    )
    assert run.probe_times == [first]


async def test_a_probe_slower_than_its_period_is_followed_at_once() -> None:
    # Also: one worker never overlaps its own probes (overlapping starts would come every 2 s). Two workers of one
    # probe are kept apart by the manager (test_manager).
    run = await run_worker(ProbeType.READINESS, spec(period_seconds=2), [S], until=10, duration=3)
    assert run.probe_times == [0, 3, 6, 9]


async def test_metrics_count_each_verdict_but_not_errors() -> None:
    run = await run_worker(ProbeType.READINESS, spec(period_seconds=1), [S, F, ERR, S], until=3.5)
    labels = run.worker.labels
    assert (labels.kind, labels.container, labels.pod, labels.namespace, labels.pod_uid) == (
        ProbeType.READINESS,
        "app",
        "web",
        "default",
        "u1",
    )
    assert run.metrics.count(labels, Result.SUCCESS) == 2
    assert run.metrics.count(labels, Result.FAILURE) == 1
    assert run.metrics.count(labels, Result.UNKNOWN) == 0
    exposition = generate_latest(run.metrics.registry).decode()
    assert (
        'prober_probe_total{container="app",namespace="default",pod="web",pod_uid="u1",probe_type="Readiness",'
        'result="successful"} 2.0'
    ) in exposition
    run.metrics.remove(labels)
    assert run.metrics.count(labels, Result.SUCCESS) == 0
    assert "prober_probe_total{" not in generate_latest(run.metrics.registry).decode()
