"""Probe results per container instance (upstream pkg/kubelet/prober/results): one cache per probe type.

A result is kept under the container's runtime ID, so a restarted container (a new ID) never inherits the verdict
of the one before it. `set` reports a change to the owner's callback, and only a change: the syncLoop hears of a
result once, not at every probe. `seed` puts the value a probe has before it first runs (readiness: not ready;
liveness: alive; startup: unknown), or a value carried over from the API status when the agent adopts a running
container after a restart, without reporting it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nodeagent.prober.spec import ProbeType

Pod = dict[str, Any]


class Result(enum.Enum):
    SUCCESS = "success"
    FAILURE = "failure"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ResultUpdate:
    kind: ProbeType
    container_id: str
    result: Result
    pod_uid: str


def initial_value(kind: ProbeType) -> Result:
    """What a probe is taken to say before it has run: not ready until proven ready; never kill a container over a
    probe that has not run; not started until the startup probe says so."""
    if kind is ProbeType.READINESS:
        return Result.FAILURE
    if kind is ProbeType.LIVENESS:
        return Result.SUCCESS
    return Result.UNKNOWN


class ResultsManager:
    def __init__(self, kind: ProbeType, on_update: Callable[[ResultUpdate, Pod], None]) -> None:
        self.kind = kind
        self._results: dict[str, Result] = {}
        self._on_update = on_update

    def get(self, container_id: str) -> Result | None:
        return self._results.get(container_id)

    def set(self, container_id: str, result: Result, pod: Pod) -> bool:
        """Record a result; True (and the owner told) when it differs from the one before."""
        if self._results.get(container_id) is result:
            return False
        self._results[container_id] = result
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        self._on_update(ResultUpdate(self.kind, container_id, result, uid), pod)
        return True

    def seed(self, container_id: str, result: Result) -> None:
        self._results[container_id] = result

    def remove(self, container_id: str) -> None:
        self._results.pop(container_id, None)

    def __len__(self) -> int:
        return len(self._results)
