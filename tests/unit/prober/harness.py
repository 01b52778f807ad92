"""Shared pieces of the prober manager's unit tests: pods with probes, runtime statuses, a scripted runner."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeagent.kuberuntime.actions import ContainerState, ContainerStatus, RuntimePodStatus
from nodeagent.prober.prober import ProbeTarget
from nodeagent.prober.results import Result
from nodeagent.prober.spec import ProbeSpec, ProbeType
from tests.unit.fakeclock import FakeClock

EXEC: dict[str, Any] = {"exec": {"command": ["true"]}, "periodSeconds": 1, "failureThreshold": 1}
R, E = ContainerState.RUNNING, ContainerState.EXITED


def pod(
    uid: str = "u1", *, deleting: bool = False, status: dict[str, Any] | None = None, **probes: Any
) -> dict[str, Any]:
    """A pod whose container "app" has the given probes (liveness=..., readiness=..., startup=...), and a "plain"
    container without any."""
    app: dict[str, Any] = {"name": "app", "image": "busybox"}
    for kind, probe in probes.items():
        app[f"{kind}Probe"] = probe
    meta: dict[str, Any] = {"name": f"pod-{uid}", "namespace": "default", "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    out: dict[str, Any] = {"metadata": meta, "spec": {"containers": [app, {"name": "plain", "image": "busybox"}]}}
    if status is not None:
        out["status"] = status
    return out


def runtime(uid: str, *containers: tuple[str, str, ContainerState, float]) -> RuntimePodStatus:
    """(id, name, state, startedAt in wall seconds) per container, newest first."""
    return RuntimePodStatus(
        uid=uid,
        containers=tuple(
            ContainerStatus(id=cid, name=name, state=state, started_at=int(started * 1e9))
            for cid, name, state, started in containers
        ),
    )


async def settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


@dataclass
class ScriptedRunner:
    """Answers each (probe type, container id) from its script; the last answer repeats; SUCCESS when unscripted.

    A cancelled probe takes a few loop turns to wind down, as a real cancelled RPC does, so a test can see whether a
    replacement worker waited for it.
    """

    clock: FakeClock
    scripts: dict[tuple[ProbeType, str], list[Result | None]] = field(default_factory=dict)
    duration: float = 0.0
    calls: list[tuple[float, ProbeType, str]] = field(default_factory=list)
    in_flight: dict[tuple[str, str, ProbeType], int] = field(default_factory=dict)
    most_in_flight: int = 0

    def script(self, kind: ProbeType, container_id: str, results: Sequence[Result | None]) -> None:
        self.scripts[(kind, container_id)] = list(results)

    async def probe(self, kind: ProbeType, target: ProbeTarget, spec: ProbeSpec) -> Result | None:
        key = (target.pod_uid, target.name, kind)
        self.calls.append((self.clock.t, kind, target.container_id))
        self.in_flight[key] = self.in_flight.get(key, 0) + 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight[key])
        try:
            if self.duration:
                await self.clock.sleep(self.duration)
            script = self.scripts.get((kind, target.container_id), [Result.SUCCESS])
            return script.pop(0) if len(script) > 1 else script[0]
        finally:
            for _ in range(5):
                await asyncio.sleep(0)
            self.in_flight[key] -= 1


@dataclass
class RecordingStatus:
    calls: list[tuple[str, str, bool]] = field(default_factory=list)

    def set_container_readiness(self, pod: dict[str, Any], container_id: str, ready: bool) -> None:
        self.calls.append(("readiness", container_id, ready))

    def set_container_startup(self, pod: dict[str, Any], container_id: str, started: bool) -> None:
        self.calls.append(("startup", container_id, started))
