"""A FakeProbeManager for unit tests of the prober's consumers: results are set by the test, no probe ever runs.

It answers as the real ProberManager does (same `probe_status` rule, same initial values, results dropped with the
container they belong to), which `tests/unit/prober/test_manager_contract.py` checks by running one scenario table
against both. It records the lifecycle calls it received.
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from nodeagent.kuberuntime.actions import ContainerState, RuntimePodStatus
from nodeagent.prober.manager import ContainerProbeStatus, FailedProbes, probe_status
from nodeagent.prober.results import Result, initial_value
from nodeagent.prober.spec import ProbeType, find_container, probe_spec, probed_containers

Pod = dict[str, Any]


@dataclass
class FakeProbeManager:
    results: dict[tuple[ProbeType, str], Result] = field(default_factory=dict)
    containers: dict[tuple[str, str], str] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    terminating: set[str] = field(default_factory=set)

    def set_result(self, kind: ProbeType, container_id: str, result: Result) -> None:
        self.results[(kind, container_id)] = result

    def ensure_probes(self, pod: Pod, status: RuntimePodStatus, pod_ips: Sequence[str]) -> None:
        del pod_ips
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        self.calls.append(("ensure_probes", uid))
        for container in probed_containers(pod):
            name = str(container.get("name", ""))
            running = next((c for c in status.containers if c.name == name and c.state is ContainerState.RUNNING), None)
            old = self.containers.get((uid, name))
            if old is not None and (running is None or running.id != old):
                self._forget(old)
                del self.containers[(uid, name)]
            if running is None:
                continue
            self.containers[(uid, name)] = running.id
            for kind in ProbeType:
                if probe_spec(container, kind) is not None:
                    self.results.setdefault((kind, running.id), initial_value(kind))

    def container_probe_status(self, pod: Pod, name: str, container_id: str, *, running: bool) -> ContainerProbeStatus:
        return probe_status(
            find_container(pod, name),
            running=running,
            startup=self.results.get((ProbeType.STARTUP, container_id)),
            readiness=self.results.get((ProbeType.READINESS, container_id)),
        )

    def failed_containers(self, uid: str) -> FailedProbes:
        ids = [cid for (pod_uid, _), cid in self.containers.items() if pod_uid == uid]
        return FailedProbes(
            liveness=frozenset(c for c in ids if self.results.get((ProbeType.LIVENESS, c)) is Result.FAILURE),
            startup=frozenset(c for c in ids if self.results.get((ProbeType.STARTUP, c)) is Result.FAILURE),
        )

    def startup_passed(self, uid: str) -> frozenset[str]:
        ids = [cid for (pod_uid, _), cid in self.containers.items() if pod_uid == uid]
        return frozenset(c for c in ids if self.results.get((ProbeType.STARTUP, c)) is Result.SUCCESS)

    def stop_liveness_and_startup(self, uid: str) -> None:
        self.calls.append(("stop_liveness_and_startup", uid))
        self.terminating.add(uid)

    def remove_pod(self, uid: str) -> None:
        self.calls.append(("remove_pod", uid))
        self._remove(lambda candidate: candidate == uid)

    def cleanup_pods(self, desired: Set[str]) -> None:
        self.calls.append(("cleanup_pods", ",".join(sorted(desired))))
        self._remove(lambda candidate: candidate not in desired)

    def _remove(self, match: Any) -> None:
        for key in [k for k in self.containers if match(k[0])]:
            self._forget(self.containers.pop(key))
        self.terminating = {uid for uid in self.terminating if not match(uid)}

    def _forget(self, container_id: str) -> None:
        for key in [k for k in self.results if k[1] == container_id]:
            del self.results[key]
