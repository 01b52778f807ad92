"""The probe manager: starts and stops probe workers with the containers they probe, keeps their results, and tells
the rest of the kubelet what the results mean (upstream pkg/kubelet/prober, the container-bound manager).

The Kubelet calls `ensure_probes` after every sync of a pod with what runs now: each running container that has
probes gets its workers (one per probe type), bound to that container's ID; a container that stopped loses its
workers and results; a restarted one gets new workers. A startup probe holds the readiness and liveness workers
back until it succeeds. A container already running when the agent started is adopted: its readiness and started
state are taken from the pod's last API status until the probes have run, and its first probes are spread over a
period.

Reading results:
- `container_probe_status` says whether a container has started and is ready (upstream UpdatePodStatus): a running
  container without a startup probe has started; a started one without a readiness probe is ready; otherwise
  the probe's last verdict decides, and before any verdict the container is neither.
- `failed_containers` lists the IDs whose liveness or startup probe failed: the runtime manager kills and restarts
  them ("Container X failed liveness probe, will be restarted").

A changed result goes two ways at once: readiness and startup go straight into the cached pod status (the status
manager's SetContainerReadiness / SetContainerStartup, so a pod leaves a Service even while its worker is busy
terminating it), and every change goes to the syncLoop's probe channel, so the pod's worker syncs at once. The
channel is never waited on: when it is full the update is dropped and counted (the next periodic sync catches up).

When a pod terminates, `stop_liveness_and_startup` stops the probes that could kill it; readiness keeps probing
until the containers stop, so a container that stops answering during its grace period leaves its Services.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any, Protocol

from nodeagent.clock import Clock, SystemClock
from nodeagent.kuberuntime.actions import ContainerState, RuntimePodStatus
from nodeagent.prober.metrics import ProbeLabels, ProberMetrics
from nodeagent.prober.prober import ProbeRunner, ProbeTarget
from nodeagent.prober.results import Result, ResultsManager, ResultUpdate, initial_value
from nodeagent.prober.spec import ProbeType, find_container, probe_spec, probed_containers
from nodeagent.prober.worker import ProbeWorker, uniform_jitter
from nodeagent.syncloop import ProbeResult

log = logging.getLogger(__name__)

Pod = dict[str, Any]
_NS_PER_SECOND = 1_000_000_000


@dataclass(frozen=True)
class ContainerProbeStatus:
    started: bool
    ready: bool


@dataclass(frozen=True)
class FailedProbes:
    liveness: frozenset[str] = frozenset()
    startup: frozenset[str] = frozenset()


class ProbeManager(Protocol):
    """What the Kubelet needs of the prober (upstream's prober.Manager)."""

    def ensure_probes(self, pod: Pod, status: RuntimePodStatus, pod_ips: Sequence[str]) -> None: ...

    def container_probe_status(
        self, pod: Pod, name: str, container_id: str, *, running: bool
    ) -> ContainerProbeStatus: ...

    def failed_containers(self, uid: str) -> FailedProbes: ...

    def startup_passed(self, uid: str) -> frozenset[str]:
        """Ids of the pod's containers whose startup probe succeeded (a sidecar holds the next container until)."""
        ...

    def stop_liveness_and_startup(self, uid: str) -> None: ...

    def remove_pod(self, uid: str) -> None: ...

    def cleanup_pods(self, desired: Set[str]) -> None: ...


class ProbeStatusSink(Protocol):
    """The status manager's part in probing: a result changes the cached pod status at once."""

    def set_container_readiness(self, pod: Pod, container_id: str, ready: bool) -> None: ...

    def set_container_startup(self, pod: Pod, container_id: str, started: bool) -> None: ...


def probe_status(
    container: Mapping[str, Any] | None, *, running: bool, startup: Result | None, readiness: Result | None
) -> ContainerProbeStatus:
    """Started and ready from the container's probes and their last results (pure; upstream UpdatePodStatus)."""
    if not running:
        return ContainerProbeStatus(started=False, ready=False)
    spec = container or {}
    started = probe_spec(spec, ProbeType.STARTUP) is None or startup is Result.SUCCESS
    if not started:
        return ContainerProbeStatus(started=False, ready=False)
    ready = probe_spec(spec, ProbeType.READINESS) is None or readiness is Result.SUCCESS
    return ContainerProbeStatus(started=True, ready=ready)


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


def _deleting(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _reported_status(pod: Mapping[str, Any], name: str, container_id: str) -> Mapping[str, Any] | None:
    """The container's status in the pod's API status, if it is about this very container instance."""
    status = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for entry in status.get(key) or ():
            if entry.get("name") == name:
                reported_id = str(entry.get("containerID") or "").rpartition("://")[2]
                return entry if reported_id == container_id else None
    return None


@dataclass
class _Running:
    worker: ProbeWorker
    task: asyncio.Task[None]


_Key = tuple[str, str, ProbeType]  # (pod UID, container name, probe type)


class ProberManager:
    def __init__(
        self,
        runner: ProbeRunner,
        *,
        status: ProbeStatusSink | None = None,
        updates: asyncio.Queue[ProbeResult] | None = None,
        metrics: ProberMetrics | None = None,
        clock: Clock | None = None,
        jitter: Callable[[float], float] = uniform_jitter,
        started_at: float | None = None,
    ) -> None:
        self._runner = runner
        self._status = status
        self._updates = updates
        self.metrics = metrics or ProberMetrics()
        self._clock = clock or SystemClock()
        self._jitter = jitter
        # Containers that started before this moment were running before the agent: they are adopted.
        self._started_at = started_at if started_at is not None else time.time()
        self._results = {kind: ResultsManager(kind, self._on_update) for kind in ProbeType}
        self._workers: dict[_Key, _Running] = {}
        # Stopped workers whose task has not finished yet, all of them per key: a successor waits for every one.
        self._ending: dict[_Key, set[asyncio.Task[None]]] = {}
        self._containers: dict[tuple[str, str], str] = {}  # (pod UID, container name) -> the tracked container ID
        self._metric_labels: dict[_Key, ProbeLabels] = {}
        self._terminating: set[str] = set()  # pods whose liveness and startup probes were stopped
        self.dropped_updates = 0

    # --- lifecycle -----------------------------------------------------------------------------------------

    def ensure_probes(self, pod: Pod, status: RuntimePodStatus, pod_ips: Sequence[str]) -> None:
        """Bring the pod's workers in line with what runs now (upstream EnsureProbes); idempotent."""
        uid = _uid(pod)
        for container in probed_containers(pod):
            name = str(container.get("name", ""))
            running = next((c for c in status.containers if c.name == name and c.state is ContainerState.RUNNING), None)
            if running is None:
                self._stop_container(uid, name)
                continue
            target = ProbeTarget(
                pod=pod,
                container=container,
                container_id=running.id,
                pod_ips=tuple(pod_ips),
                started_at=running.started_at / _NS_PER_SECOND,
            )
            tracked = self._containers.get((uid, name)) == running.id
            adopted = not tracked and target.started_at < self._started_at
            if adopted:
                self._seed_adopted(target)
            self._start_probes(target, adopted=adopted)

    def stop_liveness_and_startup(self, uid: str) -> None:
        """The pod is terminating: nothing may kill its containers now; readiness goes on (upstream)."""
        self._terminating.add(uid)
        for key in [k for k in self._workers if k[0] == uid and k[2] is not ProbeType.READINESS]:
            self._stop_worker(key)

    def remove_pod(self, uid: str) -> None:
        """Stop every probe of the pod and forget its results and metric series."""
        self._remove_pods(lambda candidate: candidate == uid)

    def cleanup_pods(self, desired: Set[str]) -> None:
        """Housekeeping: remove the probes of pods that no longer exist."""
        self._remove_pods(lambda candidate: candidate not in desired)

    async def stop(self) -> None:
        """Stop every worker (agent shutdown) and wait until they have ended."""
        for key in list(self._workers):
            self._stop_worker(key)
        await asyncio.gather(*(task for tasks in self._ending.values() for task in tasks), return_exceptions=True)

    # --- reading -------------------------------------------------------------------------------------------

    def container_probe_status(self, pod: Pod, name: str, container_id: str, *, running: bool) -> ContainerProbeStatus:
        return probe_status(
            find_container(pod, name),
            running=running,
            startup=self._results[ProbeType.STARTUP].get(container_id),
            readiness=self._results[ProbeType.READINESS].get(container_id),
        )

    def failed_containers(self, uid: str) -> FailedProbes:
        ids = [cid for (pod_uid, _), cid in self._containers.items() if pod_uid == uid]
        liveness = self._results[ProbeType.LIVENESS]
        startup = self._results[ProbeType.STARTUP]
        return FailedProbes(
            liveness=frozenset(cid for cid in ids if liveness.get(cid) is Result.FAILURE),
            startup=frozenset(cid for cid in ids if startup.get(cid) is Result.FAILURE),
        )

    def startup_passed(self, uid: str) -> frozenset[str]:
        startup = self._results[ProbeType.STARTUP]
        return frozenset(
            cid
            for (pod_uid, _), cid in self._containers.items()
            if pod_uid == uid and startup.get(cid) is Result.SUCCESS
        )

    def results_for(self, kind: ProbeType) -> ResultsManager:
        return self._results[kind]

    def worker(self, uid: str, name: str, kind: ProbeType) -> ProbeWorker | None:
        running = self._workers.get((uid, name, kind))
        return running.worker if running is not None else None

    def worker_count(self) -> int:
        return len(self._workers)

    # --- internals -----------------------------------------------------------------------------------------

    def _seed_adopted(self, target: ProbeTarget) -> None:
        """Carry the last reported verdicts over an agent restart, so an adopted container does not flap."""
        reported = _reported_status(target.pod, target.name, target.container_id)
        cid = target.container_id
        if probe_spec(target.container, ProbeType.STARTUP) is not None:
            started = reported is not None and bool(reported.get("started"))
            self._results[ProbeType.STARTUP].seed(cid, Result.SUCCESS if started else Result.UNKNOWN)
        if probe_spec(target.container, ProbeType.READINESS) is not None:
            ready = reported is not None and bool(reported.get("ready"))
            self._results[ProbeType.READINESS].seed(cid, Result.SUCCESS if ready else Result.FAILURE)
        if probe_spec(target.container, ProbeType.LIVENESS) is not None:
            self._results[ProbeType.LIVENESS].seed(cid, Result.SUCCESS)

    def _start_probes(self, target: ProbeTarget, *, adopted: bool) -> None:
        uid, name, cid = target.pod_uid, target.name, target.container_id
        old = self._containers.get((uid, name))
        if old is not None and old != cid:
            self._remove_results(old)
        for kind in ProbeType:
            running = self._workers.get((uid, name, kind))
            if running is not None and running.worker.container_id != cid:
                self._stop_worker((uid, name, kind))
        self._containers[(uid, name)] = cid
        terminating = uid in self._terminating or _deleting(target.pod)
        if probe_spec(target.container, ProbeType.STARTUP) is not None and not self._startup_succeeded(cid):
            if not terminating:
                self._ensure_worker(ProbeType.STARTUP, target, adopted=adopted)
            return
        self._ensure_worker(ProbeType.READINESS, target, adopted=adopted)
        if not terminating:
            self._ensure_worker(ProbeType.LIVENESS, target, adopted=adopted)

    def _startup_succeeded(self, container_id: str) -> bool:
        return self._results[ProbeType.STARTUP].get(container_id) is Result.SUCCESS

    def _ensure_worker(self, kind: ProbeType, target: ProbeTarget, *, adopted: bool) -> None:
        spec = probe_spec(target.container, kind)
        if spec is None:
            return
        key = (target.pod_uid, target.name, kind)
        running = self._workers.get(key)
        if running is not None:
            if running.worker.container_id == target.container_id:
                return  # already probing this instance
            self._stop_worker(key)
        results = self._results[kind]
        cached = results.get(target.container_id)
        if cached is Result.FAILURE and kind in (ProbeType.LIVENESS, ProbeType.STARTUP):
            return  # a terminal verdict: the container is about to be killed, not probed again
        if cached is None:
            results.seed(target.container_id, initial_value(kind))
        worker = ProbeWorker(
            kind,
            target,
            spec,
            runner=self._runner,
            results=results,
            metrics=self.metrics,
            clock=self._clock,
            adopted=adopted,
            jitter=self._jitter,
            on_startup_succeeded=self._on_startup_succeeded if kind is ProbeType.STARTUP else None,
        )
        self._metric_labels[key] = worker.labels
        name = f"probe-{kind.value}-{target.pod_ref}/{target.name}"
        # Every stopped run of this probe still winding down, not only the last: a replacement stopped while it
        # waited is itself one of them and ends at once, while the run it waited for may still be going.
        predecessors = frozenset(self._ending.get(key, ()))
        task = asyncio.create_task(self._guard(key, worker, predecessors), name=name)
        self._workers[key] = _Running(worker, task)
        log.info(
            "probe worker started probe=%s pod=%s container=%s id=%s adopted=%s",
            kind.value,
            target.pod_ref,
            target.name,
            target.container_id[:12],
            adopted,
        )

    async def _guard(self, key: _Key, worker: ProbeWorker, predecessors: frozenset[asyncio.Task[None]]) -> None:
        try:
            if predecessors:
                # Never two runs of one probe at once: the workers it replaces must have ended first.
                await asyncio.wait(predecessors)
            await worker.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "probe worker failed probe=%s pod=%s container=%s",
                worker.kind.value,
                worker.target.pod_ref,
                worker.target.name,
            )
        finally:
            running = self._workers.get(key)
            if running is not None and running.worker is worker:
                del self._workers[key]

    def _on_startup_succeeded(self, worker: ProbeWorker) -> None:
        key = (worker.target.pod_uid, worker.target.name, ProbeType.STARTUP)
        running = self._workers.get(key)
        if running is None or running.worker is not worker:
            return  # stopped or replaced while the probe ran
        target = worker.target
        self._ensure_worker(ProbeType.READINESS, target, adopted=worker.adopted)
        if target.pod_uid not in self._terminating and not _deleting(target.pod):
            self._ensure_worker(ProbeType.LIVENESS, target, adopted=worker.adopted)

    def _stop_worker(self, key: _Key) -> None:
        running = self._workers.pop(key, None)
        if running is not None:
            running.task.cancel()
            if not running.task.done():
                # Forgotten when the task is done, also if it is cancelled before it ever ran.
                self._ending.setdefault(key, set()).add(running.task)
                running.task.add_done_callback(lambda task: self._ended(key, task))
            log.debug("probe worker stopped probe=%s uid=%s container=%s", key[2].value, key[0], key[1])

    def _ended(self, key: _Key, task: asyncio.Task[None]) -> None:
        tasks = self._ending.get(key)
        if tasks is not None:
            tasks.discard(task)
            if not tasks:
                del self._ending[key]

    def _stop_container(self, uid: str, name: str) -> None:
        cid = self._containers.pop((uid, name), None)
        if cid is not None:
            self._remove_results(cid)
        for kind in ProbeType:
            self._stop_worker((uid, name, kind))

    def _remove_results(self, container_id: str) -> None:
        for results in self._results.values():
            results.remove(container_id)

    def _remove_pods(self, match: Callable[[str], bool]) -> None:
        for key in [k for k in self._workers if match(k[0])]:
            self._stop_worker(key)
        for uid, name in [k for k in self._containers if match(k[0])]:
            self._remove_results(self._containers.pop((uid, name)))
        for key in [k for k in self._metric_labels if match(k[0])]:
            self.metrics.remove(self._metric_labels.pop(key))
        self._terminating = {uid for uid in self._terminating if not match(uid)}

    def _on_update(self, update: ResultUpdate, pod: Pod) -> None:
        success = update.result is Result.SUCCESS
        if self._status is not None:
            if update.kind is ProbeType.READINESS:
                self._status.set_container_readiness(pod, update.container_id, success)
            elif update.kind is ProbeType.STARTUP:
                self._status.set_container_startup(pod, update.container_id, success)
        if self._updates is None:
            return
        try:
            self._updates.put_nowait(ProbeResult(update.pod_uid, update.container_id, update.kind.value, success))
        except asyncio.QueueFull:
            self.dropped_updates += 1
            log.warning(
                "probe result dropped, the syncloop channel is full probe=%s uid=%s dropped_total=%d",
                update.kind.value,
                update.pod_uid,
                self.dropped_updates,
            )
