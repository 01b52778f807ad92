"""The prober: outcome → result and event, retries on error, and which handler a probe runs with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from cri.v1 import api_pb2
from nodeagent.prober.probe import Outcome, ProbeError, ProbeOutcome
from nodeagent.prober.prober import Prober, ProbeTarget
from nodeagent.prober.results import Result
from nodeagent.prober.spec import ExecAction, GRPCAction, ProbeSpec, ProbeType, TCPSocketAction

POD: dict[str, Any] = {
    "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
    "spec": {"containers": [{"name": "app"}]},
}
TARGET = ProbeTarget(POD, {"name": "app"}, "c1", ("198.18.0.9",))
EXEC = ProbeSpec(ExecAction(("true",)))

Event = tuple[str, str, str, str]


class Scripted(Prober):
    """The real Prober with its handler step replaced by a script of outcomes (a ProbeError is raised)."""

    def __init__(self, script: Sequence[ProbeOutcome | ProbeError], events: list[Event]) -> None:
        super().__init__(_NoExec(), events=lambda pod, t, r, m, f: events.append((t, r, m, f)))
        self.script = list(script)
        self.attempts = 0

    async def run(self, spec: ProbeSpec, target: ProbeTarget) -> ProbeOutcome:
        self.attempts += 1
        step = self.script.pop(0)
        if isinstance(step, ProbeError):
            raise step
        return step


class _NoExec:
    async def exec_sync(self, container_id: str, cmd: list[str], timeout: float) -> api_pb2.ExecSyncResponse:
        raise AssertionError("not called")


FAILED = ProbeOutcome(Outcome.FAILURE, "cat: can't open '/tmp/ready'")
ERR = ProbeError('strconv.Atoi: parsing "web": invalid syntax')


@pytest.mark.parametrize(
    ("kind", "script", "result", "attempts", "events"),
    [
        (ProbeType.READINESS, [ProbeOutcome(Outcome.SUCCESS, "ok")], Result.SUCCESS, 1, []),
        (
            ProbeType.LIVENESS,
            [FAILED],
            Result.FAILURE,
            1,
            [("Warning", "Unhealthy", "Liveness probe failed: cat: can't open '/tmp/ready'", "spec.containers{app}")],
        ),
        (
            ProbeType.READINESS,
            [ProbeOutcome(Outcome.WARNING, "Probe terminated redirects, Response body: moved")],
            Result.SUCCESS,
            1,
            [
                (
                    "Warning",
                    "ProbeWarning",
                    "Readiness probe warning: Probe terminated redirects, Response body: moved",
                    "spec.containers{app}",
                )
            ],
        ),
        (ProbeType.STARTUP, [ProbeOutcome(Outcome.UNKNOWN)], Result.FAILURE, 1, []),
        # An error is retried (three attempts in all); a success on a retry counts.
        (ProbeType.LIVENESS, [ERR, ERR, ProbeOutcome(Outcome.SUCCESS)], Result.SUCCESS, 3, []),
        # Three errors: the result is thrown away (None) and one event says so.
        (
            ProbeType.STARTUP,
            [ERR, ERR, ERR],
            None,
            3,
            [
                (
                    "Warning",
                    "Unhealthy",
                    'Startup probe errored and resulted in unknown state: strconv.Atoi: parsing "web": invalid syntax',
                    "spec.containers{app}",
                )
            ],
        ),
        # A failure is not retried.
        (ProbeType.READINESS, [FAILED, ProbeOutcome(Outcome.SUCCESS)], Result.FAILURE, 1, None),
    ],
    ids=["success", "failure", "warning", "unknown", "error-then-success", "errors", "failure-no-retry"],
)
async def test_outcomes(
    kind: ProbeType,
    script: list[ProbeOutcome | ProbeError],
    result: Result | None,
    attempts: int,
    events: list[Event] | None,
) -> None:
    recorded: list[Event] = []
    prober = Scripted(script, recorded)
    assert await prober.probe(kind, TARGET, EXEC) == result
    assert prober.attempts == attempts
    if events is not None:
        assert recorded == events
    await prober.aclose()


class _Exec:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str], float]] = []

    async def exec_sync(self, container_id: str, cmd: list[str], timeout: float) -> api_pb2.ExecSyncResponse:
        self.calls.append((container_id, cmd, timeout))
        return api_pb2.ExecSyncResponse(exit_code=0)


async def test_exec_runs_in_the_target_container_with_the_probe_timeout() -> None:
    runner = _Exec()
    prober = Prober(runner)
    container = {"name": "app", "env": [{"name": "F", "value": "/tmp/ok"}]}
    target = ProbeTarget(POD, container, "c9", ())
    spec = ProbeSpec(ExecAction(("test", "-f", "$(F)")), timeout_seconds=4)
    assert await prober.run(spec, target) == ProbeOutcome(Outcome.SUCCESS, "")
    assert runner.calls == [("c9", ["test", "-f", "/tmp/ok"], 4)]
    await prober.aclose()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (ProbeSpec(TCPSocketAction(80)), "pod default/web has no IP to probe container app"),
        (ProbeSpec(GRPCAction(5000)), "pod default/web has no IP to probe container app"),
        (ProbeSpec(None), "missing probe handler for default/web:app"),
        (ProbeSpec(TCPSocketAction("web")), 'strconv.Atoi: parsing "web": invalid syntax'),
    ],
)
async def test_probes_that_cannot_run(spec: ProbeSpec, message: str) -> None:
    prober = Prober(_NoExec())
    with pytest.raises(ProbeError) as caught:
        await prober.run(spec, ProbeTarget(POD, {"name": "app"}, "c1", ()))
    assert str(caught.value) == message
    await prober.aclose()
