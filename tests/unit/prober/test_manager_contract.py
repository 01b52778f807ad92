"""The contract between FakeProbeManager and the real ProberManager: one scenario table, both implementations, the
same answers. Results are set by the scenario (the real manager's workers are given a runner whose probes always
error, so they never change a result on their own)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

import pytest
import pytest_asyncio

from nodeagent.kuberuntime.actions import RuntimePodStatus
from nodeagent.prober.fake import FakeProbeManager
from nodeagent.prober.manager import ContainerProbeStatus, FailedProbes, ProbeManager, ProberManager
from nodeagent.prober.prober import ProbeTarget
from nodeagent.prober.results import Result
from nodeagent.prober.spec import ProbeSpec, ProbeType
from tests.unit.fakeclock import FakeClock
from tests.unit.prober.harness import EXEC, E, R, pod, runtime, settle

S, F = Result.SUCCESS, Result.FAILURE
L, RD, ST = ProbeType.LIVENESS, ProbeType.READINESS, ProbeType.STARTUP


class Driven(Protocol):
    manager: ProbeManager

    def set(self, pod_: dict[str, Any], kind: ProbeType, container_id: str, result: Result) -> None: ...


class _Errors:
    async def probe(self, kind: ProbeType, target: ProbeTarget, spec: ProbeSpec) -> Result | None:
        return None


class RealDriven:
    def __init__(self) -> None:
        self.real = ProberManager(_Errors(), clock=FakeClock(), jitter=lambda p: 0.0, started_at=0.0)
        self.manager: ProbeManager = self.real

    def set(self, pod_: dict[str, Any], kind: ProbeType, container_id: str, result: Result) -> None:
        self.real.results_for(kind).set(container_id, result, pod_)


class FakeDriven:
    def __init__(self) -> None:
        self.fake = FakeProbeManager()
        self.manager: ProbeManager = self.fake

    def set(self, pod_: dict[str, Any], kind: ProbeType, container_id: str, result: Result) -> None:
        self.fake.set_result(kind, container_id, result)


@pytest_asyncio.fixture(loop_scope="session", params=["real", "fake"])
async def driven(request: pytest.FixtureRequest) -> AsyncIterator[Driven]:
    if request.param == "real":
        real = RealDriven()
        yield real
        await real.real.stop()
    else:
        yield FakeDriven()


T = 1_000.0  # containers start after the manager: nothing is adopted
Step = tuple[Any, ...]
Check = tuple[str, str, bool, ContainerProbeStatus]  # (name, container id, running, expected)

SCENARIOS: list[tuple[str, dict[str, Any], Sequence[Step], Sequence[Check], FailedProbes]] = [
    (
        "no probes: started and ready while running",
        pod(),
        [("ensure", runtime("u1", ("c1", "app", R, T)))],
        [
            ("app", "c1", True, ContainerProbeStatus(True, True)),
            ("app", "c1", False, ContainerProbeStatus(False, False)),
        ],
        FailedProbes(),
    ),
    (
        "readiness: not ready until it succeeds, and back",
        pod(readiness=EXEC),
        [("ensure", runtime("u1", ("c1", "app", R, T))), ("set", RD, "c1", S), ("set", RD, "c1", F)],
        [
            ("app", "c1", True, ContainerProbeStatus(True, False)),
            ("plain", "p1", True, ContainerProbeStatus(True, True)),
        ],
        FailedProbes(),
    ),
    (
        "readiness success",
        pod(readiness=EXEC),
        [("ensure", runtime("u1", ("c1", "app", R, T))), ("set", RD, "c1", S)],
        [("app", "c1", True, ContainerProbeStatus(True, True))],
        FailedProbes(),
    ),
    (
        "startup: neither started nor ready before it succeeds",
        pod(startup=EXEC, readiness=EXEC),
        [("ensure", runtime("u1", ("c1", "app", R, T)))],
        [("app", "c1", True, ContainerProbeStatus(False, False))],
        FailedProbes(),
    ),
    (
        "startup success without readiness probe: ready",
        pod(startup=EXEC),
        [("ensure", runtime("u1", ("c1", "app", R, T))), ("set", ST, "c1", S)],
        [("app", "c1", True, ContainerProbeStatus(True, True))],
        FailedProbes(),
    ),
    (
        "liveness and startup failures are listed",
        pod(liveness=EXEC, startup=EXEC),
        [("ensure", runtime("u1", ("c1", "app", R, T))), ("set", ST, "c1", S), ("set", L, "c1", F)],
        [("app", "c1", True, ContainerProbeStatus(True, True))],
        FailedProbes(liveness=frozenset({"c1"})),
    ),
    (
        "startup failure is listed",
        pod(startup=EXEC),
        [("ensure", runtime("u1", ("c1", "app", R, T))), ("set", ST, "c1", F)],
        [("app", "c1", True, ContainerProbeStatus(False, False))],
        FailedProbes(startup=frozenset({"c1"})),
    ),
    (
        "a restarted container starts afresh",
        pod(liveness=EXEC, readiness=EXEC),
        [
            ("ensure", runtime("u1", ("c1", "app", R, T))),
            ("set", RD, "c1", S),
            ("set", L, "c1", F),
            ("ensure", runtime("u1", ("c2", "app", R, T), ("c1", "app", E, T))),
        ],
        [
            ("app", "c2", True, ContainerProbeStatus(True, False)),
            ("app", "c1", True, ContainerProbeStatus(True, False)),
        ],
        FailedProbes(),
    ),
    (
        "a stopped container's results are gone",
        pod(readiness=EXEC),
        [
            ("ensure", runtime("u1", ("c1", "app", R, T))),
            ("set", RD, "c1", S),
            ("ensure", runtime("u1", ("c1", "app", E, T))),
        ],
        [("app", "c1", True, ContainerProbeStatus(True, False))],
        FailedProbes(),
    ),
    (
        "a removed pod's results are gone",
        pod(liveness=EXEC, readiness=EXEC),
        [("ensure", runtime("u1", ("c1", "app", R, T))), ("set", RD, "c1", S), ("set", L, "c1", F), ("remove",)],
        [("app", "c1", True, ContainerProbeStatus(True, False))],
        FailedProbes(),
    ),
    (
        "cleanup keeps desired pods",
        pod(readiness=EXEC),
        [("ensure", runtime("u1", ("c1", "app", R, T))), ("set", RD, "c1", S), ("cleanup", {"u1"})],
        [("app", "c1", True, ContainerProbeStatus(True, True))],
        FailedProbes(),
    ),
    (
        "termination keeps readiness verdicts",
        pod(readiness=EXEC, liveness=EXEC),
        [("ensure", runtime("u1", ("c1", "app", R, T))), ("set", RD, "c1", S), ("stop",)],
        [("app", "c1", True, ContainerProbeStatus(True, True))],
        FailedProbes(),
    ),
]


@pytest.mark.parametrize(
    ("pod_", "steps", "checks", "failed"), [s[1:] for s in SCENARIOS], ids=[s[0] for s in SCENARIOS]
)
async def test_contract(
    driven: Driven, pod_: dict[str, Any], steps: Sequence[Step], checks: Sequence[Check], failed: FailedProbes
) -> None:
    manager = driven.manager
    for step in steps:
        if step[0] == "ensure":
            status: RuntimePodStatus = step[1]
            manager.ensure_probes(pod_, status, ["198.18.0.9"])
        elif step[0] == "set":
            driven.set(pod_, step[1], step[2], step[3])
        elif step[0] == "remove":
            manager.remove_pod("u1")
        elif step[0] == "cleanup":
            manager.cleanup_pods(step[1])
        elif step[0] == "stop":
            manager.stop_liveness_and_startup("u1")
        await settle()
    for name, cid, running, expected in checks:
        assert manager.container_probe_status(pod_, name, cid, running=running) == expected, (name, cid)
    assert manager.failed_containers("u1") == failed


@pytest.mark.parametrize(
    ("result", "passed"),
    [(None, frozenset()), (S, frozenset({"c1"})), (F, frozenset())],
    ids=["not yet probed", "succeeded", "failed"],
)
async def test_startup_passed(driven: Driven, result: Any, passed: frozenset[str]) -> None:
    """What holds a sidecar's next container: only a startup probe that succeeded lets it go on."""
    pod_ = pod(startup=EXEC)
    driven.manager.ensure_probes(pod_, runtime("u1", ("c1", "app", R, T)), ["198.18.0.9"])
    if result is not None:
        driven.set(pod_, ST, "c1", result)
    await settle()
    assert driven.manager.startup_passed("u1") == passed
    assert driven.manager.startup_passed("other") == frozenset()
