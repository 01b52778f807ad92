"""Pod startup latency as clusterloader2's PodStartupLatency measures it, for a benchmark's own pods.

clusterloader2 (k8s.io/perf-tests, pkg/measurement/common/slos/pod_startup_latency.go) watches the pods and
takes every phase from the time its watch received an event, not from timestamps written in the objects:
- create: the pod first seen;
- schedule: the pod first seen with `spec.nodeName` set;
- watch (and run): the pod first seen with phase Running.
`schedule_to_watch` is watch minus schedule (the node's share: the kubelet saw the binding, started the pod and
its status came back), `pod_startup` is watch minus create.

`paced_create` creates pods at a fixed rate (clusterloader2's qpsLoad tuning set), each create on its own task so
that one slow answer does not hold up the next.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from benchmarks.common import percentile

TRANSITIONS = {
    "create_to_schedule": ("create", "schedule"),
    "schedule_to_watch": ("schedule", "watch"),
    "pod_startup": ("create", "watch"),
}


class StartupLatency:
    """The receive time of each phase of each pod (namespace/name), from a watch's events."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.phases: dict[str, dict[str, float]] = {}

    def observe(self, kind: str, pod: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        now = self.clock()
        meta = pod["metadata"]
        seen = self.phases.setdefault(f"{meta.get('namespace', '')}/{meta['name']}", {})
        seen.setdefault("create", now)
        if (pod.get("spec") or {}).get("nodeName"):
            seen.setdefault("schedule", now)
        if (pod.get("status") or {}).get("phase") == "Running":
            seen.setdefault("watch", now)

    async def record(self, kind: str, pod: dict[str, Any]) -> None:
        self.observe(kind, pod)

    def running(self) -> int:
        return sum(1 for seen in self.phases.values() if "watch" in seen)

    def latencies(self, transition: str) -> list[float]:
        start, end = TRANSITIONS[transition]
        return [seen[end] - seen[start] for seen in self.phases.values() if start in seen and end in seen]

    def summary(self) -> dict[str, Any]:
        """p50/p99/max in ms of each transition, and how many pods each covers."""
        out: dict[str, Any] = {}
        for transition in TRANSITIONS:
            values = self.latencies(transition)
            out[transition] = {
                "pods": len(values),
                "p50_ms": round(percentile(values, 0.5) * 1000, 1) if values else None,
                "p99_ms": round(percentile(values, 0.99) * 1000, 1) if values else None,
                "max_ms": round(max(values) * 1000, 1) if values else None,
            }
        return out


async def paced_create(
    create: Callable[[dict[str, Any]], Awaitable[object]],
    bodies: Sequence[dict[str, Any]],
    rate: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> float:
    """Create `bodies` at `rate` per second, the i-th due at i/rate from the start; waits for every create and
    returns the rate achieved (bodies per second from the first create to the last one's start). A failed create
    raises when all are done."""
    began = clock()
    tasks: list[asyncio.Task[object]] = []
    last = began
    for i, body in enumerate(bodies):
        due = began + i / rate
        delay = due - clock()
        if delay > 0:
            await sleep(delay)
        last = clock()
        tasks.append(asyncio.ensure_future(create(body)))
    await asyncio.gather(*tasks)
    spread = last - began
    return round((len(bodies) - 1) / spread, 1) if spread > 0 else float(len(bodies))
