"""The Kubelet: the SyncHandler the syncLoop dispatches to, and the PodSyncer the pod workers call.

It owns no decisions of its own: admission is `nodeagent.admission.admit`, what to do with a pod is
`kuberuntime.compute_pod_actions` (carried out by RuntimeManager), its status is
`nodeagent.status.generate_pod_status`, and readiness and liveness are the prober's. This module routes between them:

- additions are admitted (the eviction manager's handler first, as upstream's; a rejected pod is set Failed with
  upstream's reason and message, and an event), then handed to a pod worker; updates, deletes and syncs go to the
  worker; a pod that left its source is killed; a status-only change syncs the pod when its readiness gates no
  longer agree with its Ready condition;
- a worker's sync gets the pod's runtime status from the PLEG's cache (newer than its last sync), runs the runtime
  manager with it (containers whose liveness or startup probe failed are restarted), lets the prober start and stop
  workers for what runs, and publishes the status generated from it with the prober's started/ready flags (over
  the status it set last, with the conditions others own as the apiserver shows them); a sync
  that changed the runtime asks the PLEG to relist the pod at once; a final phase starts termination;
- termination first stops the liveness and startup probes (readiness goes on until the containers stop), then stops
  containers and sandbox with the grace period and reads the runtime directly to report what is left (as upstream);
  once terminated, a container that reported no end is marked ContainerStatusUnknown and the phase made terminal
  (upstream's TerminatePod); a pod deleted through the API is then removed from the runtime and finally deleted
  from the API (grace 0, UID precondition), as the kubelet does;
- `evict_pod` (the eviction manager's killPodNow) kills a pod through its worker with the eviction's grace period;
  its status is Failed with the eviction's reason and message (and DisruptionTarget) before and after the kill;
- a sync that raised makes its pod due again after the pod workers' back-off (10-15 s), as upstream's completeWork;
- housekeeping kills runtime pods carrying our labels that no source knows, forgets the finished workers of pods no
  source knows and runs their unfinished ones again (a termination that failed after the pod left is retried there),
  and drops the probes of pods that neither a source nor a worker knows (a pod still terminating keeps them);
- static pods (`nodeagent.staticpods`): a mirror pod is never run, a change to one syncs its static pod; a static
  pod's sync puts its mirror right and waits while an earlier pod of the same full name terminates; housekeeping
  deletes mirror pods whose static pod is gone.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cri.errors import CRIError
from nodeagent import activedeadline as active_deadline
from nodeagent import preemption as critical_preemption
from nodeagent.admission import SysctlAllowlist, admit
from nodeagent.allocation import AllocationManager
from nodeagent.allocation import manager as allocation_triggers
from nodeagent.allocation.resize import ERROR as RESIZE_ERROR
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import Conflict, NotFound
from nodeagent.kuberuntime import actions as acts
from nodeagent.kuberuntime.manager import RuntimeManager, SyncResult, Waiting
from nodeagent.kuberuntime.termination_message import cap_message, pod_message_budget
from nodeagent.podconfig import PodConfig
from nodeagent.podconfig.storage import pod_ref as _ref
from nodeagent.podworkers import (
    PodStatusSource,
    PodWorkers,
    UpdatePodOptions,
    UpdateType,
    WorkState,
    backoff_after_error,
)
from nodeagent.preemption import CriticalPodAdmissionHandler
from nodeagent.prober import ContainerProbeStatus, FailedProbes, ProbeManager
from nodeagent.staticpods import MirrorPods, StaticPodGate, full_name, is_mirror_pod, is_static_pod
from nodeagent.status import failed_pod_status, generate_pod_status
from nodeagent.status._common import pod_generation
from nodeagent.status.conditions import need_to_reconcile_pod_readiness
from nodeagent.status.container_status import ContainerInput, RuntimeState, TerminatedRun
from nodeagent.status.terminate import terminated_pod_status
from nodeagent.volumemanager import VolumeManager, VolumeWaitError
from pleg.status import PodStatus

log = logging.getLogger(__name__)

Pod = dict[str, Any]
TERMINAL_PHASES = ("Succeeded", "Failed")
VOLUME_RETRY_SECONDS = 10.0  # upstream's pod worker back-off after a SyncPod error
API_SOURCE = "api"
DISRUPTION_TARGET = "DisruptionTarget"
TERMINATION_BY_KUBELET = "TerminationByKubelet"

_STATES = {
    acts.ContainerState.CREATED: RuntimeState.CREATED,
    acts.ContainerState.RUNNING: RuntimeState.RUNNING,
    acts.ContainerState.EXITED: RuntimeState.EXITED,
    acts.ContainerState.UNKNOWN: RuntimeState.UNKNOWN,
}


def _meta(pod: Pod) -> dict[str, Any]:
    out: dict[str, Any] = pod.get("metadata") or {}
    return out


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


def _reason_view(reasons: Mapping[str, Waiting]) -> dict[str, tuple[str, str]]:
    # What the status shows of the reasons (retry_after only schedules the next sync).
    return {name: (w.reason, w.message) for name, w in reasons.items()}


def _time(ns: int) -> datetime.datetime | None:
    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC) if ns else None


# (container name, container id, running) -> the prober's started/ready view of that container.
ProbeView = Callable[[str, str, bool], ContainerProbeStatus]


@dataclass(frozen=True)
class PodEviction:
    """The status an evicted pod gets: phase Failed with the reason and message, and for node pressure upstream's
    DisruptionTarget condition (reason TerminationByKubelet)."""

    reason: str
    message: str
    disruption_target: bool = False
    condition_message: str = ""  # the DisruptionTarget condition's, when it differs from the status message
    # A pod already Succeeded stays so (the node shutdown manager's status function); eviction makes every pod Failed.
    keep_succeeded: bool = False
    # Upstream's killPodNow isEvicted: true for the eviction manager and critical-pod preemption, false for the node
    # shutdown manager. An evicted pod's containers may be removed as soon as they have stopped (container GC).
    evict: bool = True

    def apply(self, status: dict[str, Any], now: datetime.datetime) -> dict[str, Any]:
        out = dict(status)
        succeeded = self.keep_succeeded and out.get("phase") == "Succeeded"
        out.update(phase="Succeeded" if succeeded else "Failed", reason=self.reason, message=self.message)
        if self.disruption_target:
            conditions = [c for c in out.get("conditions") or () if c.get("type") != DISRUPTION_TARGET]
            old = next((c for c in out.get("conditions") or () if c.get("type") == DISRUPTION_TARGET), None)
            stamp = now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            keep = old is not None and old.get("status") == "True" and old.get("lastTransitionTime")
            conditions.append(
                {
                    "type": DISRUPTION_TARGET,
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": old["lastTransitionTime"] if keep and old is not None else stamp,
                    "reason": TERMINATION_BY_KUBELET,
                    "message": self.condition_message or self.message,
                }
            )
            out["conditions"] = conditions
        return out

    @staticmethod
    def after_kill(generated: dict[str, Any], killed: Mapping[str, Any]) -> dict[str, Any]:
        """The status once the pod's containers have stopped, as upstream's generateAPIPodStatus after the kill
        (the eviction's status function is not applied again): the phase from how the containers ended, the
        kill's terminal phase kept when that gives none (a static pod); the kill's reason and message only when the
        phase is the kill's; its DisruptionTarget condition in any case. A pod preempted or evicted whose
        containers all exited 0 ends Succeeded, as on upstream."""
        out = dict(generated)
        if out.get("phase") not in TERMINAL_PHASES and killed.get("phase") in TERMINAL_PHASES:
            out["phase"] = killed["phase"]
        if out.get("phase") == killed.get("phase"):
            for key in ("reason", "message"):
                if key in killed:
                    out[key] = killed[key]
        target = next((c for c in killed.get("conditions") or () if c.get("type") == DISRUPTION_TARGET), None)
        if target is not None:
            conditions = [c for c in out.get("conditions") or () if c.get("type") != DISRUPTION_TARGET]
            out["conditions"] = [*conditions, dict(target)]
        return out


# The status a pod preempted for a critical pod gets (upstream's CriticalPodAdmissionHandler status function).
PREEMPTION = PodEviction(
    critical_preemption.PREEMPT_REASON,
    critical_preemption.MESSAGE,
    disruption_target=True,
    condition_message=critical_preemption.CONDITION_MESSAGE,
)


def container_inputs(
    spec_containers: Sequence[dict[str, Any]],
    status: acts.RuntimePodStatus,
    reasons: Mapping[str, Waiting] | None,
    probes: ProbeView | None = None,
    *,
    message_limit: int | None = None,
    actuated_memory: Mapping[str, str] | None = None,
) -> list[ContainerInput]:
    """What status generation needs per spec container: its newest instance, the run before it, why an earlier sync
    could not start it (`reasons`, by container name), and (from the prober) whether it has started and is ready.
    Without a prober a running container is started and ready, as upstream treats containers without probes.
    Terminated messages keep at most `message_limit` bytes (the pod's share of 12 KiB, as upstream's
    normalizeStatus)."""

    def message(text: str) -> str:
        return text if message_limit is None else cap_message(text, message_limit)

    out = []
    for spec in spec_containers:
        name = str(spec.get("name", ""))
        instances = [c for c in status.containers if c.name == name]  # newest first
        waiting = reasons.get(name) if reasons is not None else None
        if not instances:
            out.append(
                ContainerInput(
                    name=name,
                    image=str(spec.get("image", "")),
                    waiting_reason=waiting.reason if waiting else "",
                    waiting_message=waiting.message if waiting else "",
                )
            )
            continue
        current = instances[0]
        running = current.state is acts.ContainerState.RUNNING
        view = probes(name, current.id, running) if probes is not None else ContainerProbeStatus(running, running)
        previous = next((c for c in instances[1:] if c.state is acts.ContainerState.EXITED), None)
        applied = current.resources
        # As upstream's toKubeContainerResources: only values the runtime reports as set.
        cpu_limit = applied.cpu_limit_milli if applied is not None and applied.cpu_period > 0 else 0
        cpu_request = applied.cpu_request_milli if applied is not None else 0
        memory_limit = applied.memory_limit if applied is not None else 0
        last = None
        if previous is not None:
            last = TerminatedRun(
                exit_code=previous.exit_code,
                reason=previous.reason,
                message=message(previous.message),
                started_at=_time(previous.started_at),
                finished_at=_time(previous.finished_at),
                container_id=previous.id,
            )
        out.append(
            ContainerInput(
                name=name,
                image=str(spec.get("image", "")),
                state=_STATES.get(current.state, RuntimeState.UNKNOWN),
                container_id=current.id,
                image_id=current.image_ref,
                started_at=_time(current.started_at),
                finished_at=_time(current.finished_at),
                exit_code=current.exit_code,
                reason=current.reason,
                message=message(current.message),
                restart_count=current.restart_count,
                last_terminated=last,
                waiting_reason=waiting.reason if waiting else "",
                waiting_message=waiting.message if waiting else "",
                ready=view.ready,
                started=view.started,
                cpu_limit_milli=cpu_limit or None,
                cpu_request_milli=cpu_request or None,
                memory_limit=memory_limit or None,
                actuated_memory_request=(actuated_memory or {}).get(name),
            )
        )
    return out


def _running(status: acts.RuntimePodStatus, name: str) -> bool:
    found = status.find_container(name)
    return found is not None and found.state is acts.ContainerState.RUNNING


class PodStatusStore(Protocol):
    """The narrow part of the status manager the Kubelet uses (the real one patches the apiserver)."""

    def set_pod_status(self, pod: Pod, status: dict[str, Any]) -> None: ...

    def get_pod_status(self, uid: str) -> dict[str, Any] | None: ...

    def pod_status_view(self, uid: str) -> Mapping[str, Any] | None: ...

    def remove_orphans(self, known_uids: set[str]) -> None: ...


def go_path_error(op: str, exc: OSError) -> str:
    """An OSError as Go's *PathError prints it: "mkdir /var/lib/kubelet/pods/x: no space left on device"."""
    reason = exc.strerror or str(exc)
    return f"{op} {exc.filename}: {reason[:1].lower()}{reason[1:]}" if exc.filename else reason


@dataclass
class Kubelet:
    node_name: str
    pod_config: PodConfig
    runtime: RuntimeManager
    status_manager: PodStatusStore
    node: Callable[[], dict[str, Any] | None]
    pod_cache: PodStatusSource
    client: KubeClient | None = None
    host_ips: tuple[str, ...] = ()
    # The runtime's name from its Version answer: the type of the containerIDs in pod statuses (`<type>://<id>`).
    runtime_type: str = "containerd"
    record_event: Callable[[Pod, str, str, str], None] = lambda pod, type_, reason, message: None
    prober: ProbeManager | None = None
    # The PLEG's on-demand relist of one pod (upstream: RequestPodRelist after a SyncPod that acted).
    request_relist: Callable[[str], None] = lambda uid: None
    # The PLEG's relist of one pod that inspects it even when no container changed state (after a resize).
    request_reinspect: Callable[[str], None] = lambda uid: None
    sync_frequency: float = 60.0
    mirror_pods: MirrorPods | None = None  # None without an apiserver (standalone)
    sysctls: SysctlAllowlist | None = None  # the sysctls pods may set (safe + allowedUnsafeSysctls)
    volumes: VolumeManager | None = None  # None: volumes are not set up (unit tests of other parts)
    # Whether the pod's runtime handler makes recursive read-only mounts (RuntimeManager's answer), for the
    # recursiveReadOnly the container statuses' volumeMounts show.
    supports_recursive_read_only: Callable[[Pod], bool] = lambda pod: False
    # Upstream's eviction admit handler, the first admit handler: None admits, else (reason, message).
    eviction_admit: Callable[[Pod], tuple[str, str] | None] = lambda pod: None
    # Upstream's node shutdown manager's admit handler, added after the predicates: every pod refused while the node
    # shuts down (nodeshutdown/manager.py). None admits.
    shutdown_admit: Callable[[Pod], tuple[str, str] | None] = lambda pod: None
    # Upstream's resource allocation admit handler (the device manager's Allocate for every container), between
    # the sysctls and the predicates: None admits, else (reason, message). None: no device manager.
    device_admit: Callable[[Pod], Awaitable[tuple[str, str] | None]] | None = None
    # The Node as the predicates see it for a pod (upstream's UpdatePluginResources: a pod holding devices counts
    # them in allocatable even when their plugin is gone).
    node_for_admission: Callable[[Pod, dict[str, Any] | None], Mapping[str, Any] | None] = lambda pod, node: node
    # Upstream's UnprepareDynamicResources, after a terminating pod's containers stopped and before its final
    # status: raises when it must be tried again (the terminating sync then fails and is retried). None: no DRA.
    unprepare_resources: Callable[[Pod], Awaitable[None]] | None = None
    # In-place resize (upstream's allocation manager): None runs every pod as its spec says, never resized.
    allocation: AllocationManager | None = None
    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)
    rand: Callable[[], float] = random.random  # the jitter of the back-off after a failed sync
    workers: PodWorkers = field(init=False)
    # Upstream's CriticalPodAdmissionHandler, the failure handler of the GeneralPredicates.
    preemption: CriticalPodAdmissionHandler = field(init=False)
    _next_sync: dict[str, float] = field(default_factory=dict)
    _rejected: set[str] = field(default_factory=set)
    _wakeups: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    _static_gate: StaticPodGate = field(default_factory=StaticPodGate)
    # Pod UID -> the status an eviction gives the pod while it goes down (upstream's killPodNow status function).
    _evictions: dict[str, PodEviction] = field(default_factory=dict)
    # Pod UID -> container name -> why the last attempt to start it failed (upstream's reasonCache): the status of
    # the pod's NEXT sync shows it, as upstream's generateAPIPodStatus does.
    _reasons: dict[str, dict[str, Waiting]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workers = PodWorkers(
            self,
            pod_cache=self.pod_cache,
            now=lambda: self.wall().timestamp(),
            on_error=self._sync_failed,
            request_relist=self.request_relist,
        )
        self.preemption = CriticalPodAdmissionHandler(
            active_pods=self.active_pods,
            kill_pod=lambda pod, grace: self.evict_pod(dict(pod), PREEMPTION, grace),
            pod_killed=lambda pod: self.pod_cleaned_up(dict(pod)),
            record_event=lambda pod, type_, reason, message: self.record_event(dict(pod), type_, reason, message),
        )

    # --- SyncHandler -------------------------------------------------------------------------------------------

    async def handle_pod_additions(self, pods: Sequence[Pod]) -> None:
        # The known pods once for the whole batch: which of them are active is looked at per addition, so a pod
        # admitted earlier in the batch counts against the next one, as upstream. Copies (admission hands them on;
        # preemption may kill one), but only of the pods that can be active: those with a worker, and this batch's.
        batch = {_uid(p) for p in pods}
        known = [
            copy.deepcopy(dict(p))
            for p in self.pod_config.pod_views()
            if _uid(p) in batch or self.workers.state(_uid(p)) is not None
        ]
        for pod in sorted(pods, key=lambda p: str(_meta(p).get("creationTimestamp", ""))):
            if is_mirror_pod(pod):
                self._handle_mirror_pod(pod)
                continue
            # As upstream, a pod that finished before we saw it is not admitted, but it goes to a worker all the same:
            # what it left in the runtime is stopped, and a deleted one is removed from the API (an agent that died
            # between its last status and that delete left it there).
            finished = (pod.get("status") or {}).get("phase") in TERMINAL_PHASES
            if self.workers.state(_uid(pod)) is None and not finished:
                refused = self.eviction_admit(pod)
                if refused is not None:
                    self._reject(pod, *refused)
                    continue
                active = [p for p in known if self._active(p) and _uid(p) != _uid(pod)]
                refused = await self._device_admit(pod)
                if refused is not None:
                    self._reject(pod, *refused)
                    continue
                # As upstream's allocation manager AddPod: the pod and the others as allocated (a restart keeps an
                # accepted resize; admission counts what is allocated, not what a spec asks for).
                refused = self._admit_allocated(pod, active)
                # As upstream, the pods preempted for a critical pod are killed within its admission, before it runs.
                await self.preemption.evict_preempted()
                if refused is None:
                    refused = self.shutdown_admit(pod)
                if refused is not None:
                    self._reject(pod, *refused)
                    continue
            self.workers.update_pod(UpdatePodOptions(UpdateType.CREATE, pod))
        if self.allocation is not None:
            self._retry_resizes(allocation_triggers.TRIGGER_PODS_ADDED)

    async def handle_pod_updates(self, pods: Sequence[Pod]) -> None:
        for pod in pods:
            if is_mirror_pod(pod):
                self._handle_mirror_pod(pod)
                continue
            deleting = bool(_meta(pod).get("deletionTimestamp"))
            if _uid(pod) in self._rejected:
                if not deleting:
                    continue
                # A rejected pod being deleted: a worker goes straight to terminating (nothing runs) and then makes
                # the final API delete, so the pod does not hang in Terminating.
                self._rejected.discard(_uid(pod))
            if deleting:
                # A worker that already finished (a completed Job, say) starts again only to clean up.
                self.workers.forget(_uid(pod))
            elif self.allocation is not None:
                # As upstream's HandlePodUpdates: a spec that differs from the allocation is a resize to decide; one
                # that no longer differs (a resize reverted) is no longer pending.
                if self.allocation.update_pod_from_allocation(pod)[1]:
                    self.allocation.push_pending_resize(_uid(pod))
                    self._retry_resizes(allocation_triggers.TRIGGER_POD_UPDATED)
                else:
                    self.allocation.clear_pending(_uid(pod))
            self.workers.update_pod(UpdatePodOptions(UpdateType.UPDATE, pod))

    async def handle_pod_removes(self, pods: Sequence[Pod]) -> None:
        for pod in pods:
            if is_mirror_pod(pod):
                self._handle_mirror_pod(pod)
                continue
            self._rejected.discard(_uid(pod))
            if self.allocation is not None:
                self.allocation.remove_pod(_uid(pod))
            self.workers.update_pod(UpdatePodOptions(UpdateType.KILL, pod))
        if self.allocation is not None:
            self._retry_resizes(allocation_triggers.TRIGGER_PODS_REMOVED)

    async def handle_pod_reconcile(self, pods: Sequence[Pod]) -> None:
        for pod in pods:
            # As upstream's HandlePodReconcile: a status-only change syncs the pod when its Ready condition no longer
            # agrees with its readiness gates (a controller or a user set a gate's condition).
            if is_mirror_pod(pod) or _uid(pod) in self._rejected or not need_to_reconcile_pod_readiness(pod):
                continue
            if self.workers.state(_uid(pod)) is WorkState.SYNCING:
                self.workers.update_pod(UpdatePodOptions(UpdateType.SYNC, pod))

    async def handle_pod_syncs(self, pods: Sequence[Pod]) -> None:
        for pod in pods:
            if _uid(pod) in self._rejected or is_mirror_pod(pod):
                continue
            if self.workers.state(_uid(pod)) is None:
                # Not added yet: its ADD is still queued behind this PLEG event or probe result (the syncLoop
                # chooses at random among ready channels). Upstream finds no such pod in its pod manager and does
                # nothing; a sync here would run before admission (after a restart: without the resize
                # conditions admission backfills, which the status then loses).
                continue
            self.workers.update_pod(UpdatePodOptions(UpdateType.SYNC, pod))

    async def handle_pod_cleanups(self) -> None:
        known = {_uid(p) for p in self.pod_config.pod_views()}
        # As upstream's SyncKnownPods: finished workers of pods gone from every source are forgotten, unfinished
        # ones run again (a termination that failed after its pod left is retried here, and only here).
        self.workers.sync_known_pods(known)
        busy = set(self.workers.known_uids())
        if self.prober is not None:
            # A pod that left its source but is still terminating keeps its probes (readiness through the grace
            # period), results and metric series, as upstream keeps those of the pods its workers still know.
            self.prober.cleanup_pods(known | busy)
        # The bookkeeping from one snapshot, before the first await: the syncLoop goes on dispatching while
        # housekeeping waits for the runtime, so a pod may be added meanwhile.
        self.status_manager.remove_orphans(known)
        if self.allocation is not None:
            self.allocation.remove_orphans(known | busy)
            if self.allocation.has_pending_resizes() and self.allocation.retry_due():
                self._retry_resizes(allocation_triggers.TRIGGER_PERIODIC)
        for uid in [u for u in self._evictions if u not in known and self.workers.state(u) is None]:
            del self._evictions[uid]
        for uid in [u for u in self._reasons if u not in known and self.workers.state(u) is None]:
            del self._reasons[uid]
        try:
            await self._remove_unknown_runtime_pods(known | busy)
        except CRIError as exc:
            # As upstream ("Failed cleaning pods"): the runtime may be down; the next housekeeping tries again.
            log.warning("housekeeping failed cleaning pods error=%s", exc)
        if self.volumes is not None:
            # After the unknown runtime pods are gone: their directories go once nothing of theirs is mounted.
            await self.volumes.cleanup_orphaned_pod_dirs(
                lambda uid: self.pod_config.pod_view(uid) is not None or self.workers.state(uid) is not None
            )
        if self.mirror_pods is not None:
            alive = {
                full_name(p) for uid in self.workers.known_uids() if self._alive(uid) and (p := self.workers.pod(uid))
            }
            await self.mirror_pods.delete_orphans(self.pod_config.pod_views(), alive)

    async def _remove_unknown_runtime_pods(self, wanted: set[str]) -> None:
        for uid, status in (await self.runtime.list_pods(skip=wanted)).items():
            # The list leaves out `wanted`, the snapshot housekeeping began with; a pod added since (its sandbox may
            # be in the list) is known now.
            if self.pod_config.pod_view(uid) is not None or self.workers.state(uid) is not None:
                continue
            if not any(c.state is acts.ContainerState.RUNNING for c in status.containers) and not any(
                s.state is acts.SandboxState.READY for s in status.sandboxes
            ):
                await self.runtime.remove_pod(status)
                continue
            log.info("housekeeping killing unwanted pod uid=%s pod=%s/%s", uid, status.namespace, status.name)
            await self.runtime.kill_pod(None, status, grace_period=0)
            await self.runtime.remove_pod(status)

    def active_pods(self) -> list[Pod]:
        """The admitted pods not yet terminal nor being evicted (upstream's GetActivePods), for the eviction
        manager; mirror pods are left out, their static pods stand for them. Copies: the callers may keep them."""
        return [copy.deepcopy(dict(p)) for p in self.active_pod_views()]

    def active_pod_views(self) -> list[Mapping[str, Any]]:
        """`active_pods` without the copies (the stored pods, which are replaced, never edited in place), for
        readers that only look, such as the QoS cgroups' update at every pod sync: in a 100-pod churn, copying every
        pod there took 17% of the event loop (py-spy, 2026-11-30)."""
        return [
            p
            for p in self.pod_config.pod_views()
            if not is_mirror_pod(p) and self._active(p) and _uid(p) not in self._evictions
        ]

    def pods_due(self) -> list[Pod]:
        now = self.monotonic()
        due = []
        for pod in self.pod_config.pod_views():  # looked at every second: copied only when due
            uid = _uid(pod)
            if uid in self._rejected or self.workers.state(uid) is None:
                continue
            # As upstream's getPodsToSync, a pod past its active deadline is due whatever its schedule.
            past_deadline = self.workers.state(uid) is WorkState.SYNCING and self._past_active_deadline(pod)
            if self._next_sync.get(uid, 0.0) <= now or past_deadline:
                due.append(copy.deepcopy(dict(pod)))
                self._next_sync[uid] = now + self.sync_frequency
        return due

    # --- PodSyncer ---------------------------------------------------------------------------------------------

    async def sync_pod(self, update_type: UpdateType, pod: Pod, status: PodStatus) -> bool:
        del update_type
        uid = _uid(pod)
        if self.allocation is not None:
            # As upstream's pod workers: the pod synced is the pod as allocated (a pending resize is not acted on).
            pod = self.allocation.allocated_pod(pod)
        api_phase = (pod.get("status") or {}).get("phase")
        if api_phase in TERMINAL_PHASES:
            return True
        if is_static_pod(pod):
            if not self._static_gate.allow_start(pod, alive=self._alive):
                log.info("static pod waits for the earlier pod of its name to terminate pod=%s uid=%s", _ref(pod), uid)
                self._next_sync[uid] = self.monotonic() + 1.0
                return False
            if self.mirror_pods is not None:
                await self.mirror_pods.sync(pod)
        runtime_status = self.runtime.runtime_status(status)
        if self.allocation is not None:
            # As upstream's SyncPod: whether a resize is still being actuated (PodResizeInProgress), or done
            # (ResizeCompleted), before the status is generated.
            self.allocation.check_resize_in_progress(pod, lambda name: _running(runtime_status, name))
        # As upstream's SyncPod, the status is generated and set FIRST, from what the sync decides on (the PLEG's
        # status) and why earlier syncs could not start containers: what this sync does (a sandbox and its IP, a
        # failed start) shows in the next sync's status, which the relist asked for below brings on at once.
        generated = self._generate(
            pod,
            runtime_status,
            self._waiting(pod, runtime_status),
            sandbox_ready=self._sandbox_ready(runtime_status),
        )
        if self._past_active_deadline(pod):
            # As upstream: the status is already Failed, so nothing starts; termination kills what runs.
            self._deadline_exceeded(pod, generated, record=True)
            self._publish(pod, generated)
            return True
        self._publish(pod, generated)
        if generated["phase"] in TERMINAL_PHASES:
            return True  # as upstream: a terminal pod is not set up again; termination stops what is left
        if self.volumes is not None and not await self._volumes_ready(pod, runtime_status):
            return False
        failed = self.prober.failed_containers(uid) if self.prober is not None else FailedProbes()
        result = await self.runtime.sync_pod(
            pod,
            runtime_status,
            liveness_failed=failed.liveness,
            startup_failed=failed.startup,
            startup_passed=self.prober.startup_passed(uid) if self.prober is not None else None,
        )
        if self.prober is not None:
            # Workers start with the containers in this status and stop with those that are gone; what this sync
            # started gets its workers at the next sync, which the relist asked for below brings on at once.
            self.prober.ensure_probes(pod, runtime_status, self._pod_ips(pod, runtime_status, result))
        if result.resize_error is not None and self.allocation is not None:
            # As upstream: a failed actuation shows in PodResizeInProgress (reason Error) until a sync completes it.
            self.allocation.set_in_progress(uid, RESIZE_ERROR, result.resize_error, pod_generation(pod))
        reasons_changed = self._remember_reasons(uid, result)
        self._schedule(uid, result, deadline_in=active_deadline.time_left(pod, generated, self.wall()))
        if result.resized:
            # As upstream's SetPodWatchCondition after doPodResizeAction: the runtime's view of the resized
            # containers is read again, and the pod synced on it (PodResizeInProgress cleared, ResizeCompleted).
            self.request_reinspect(uid)
            asyncio.get_running_loop().call_soon(self._resync, uid)
        elif result.changed:
            self.request_relist(uid)
        elif reasons_changed:
            # Nothing changed in the runtime, so no relist brings the next sync: ask for it, so that the new
            # reasons (a back-off after a failed start, say) show now rather than at the next resync.
            self.request_relist(uid)
            asyncio.get_running_loop().call_soon(self._resync, uid)
        return False

    async def _volumes_ready(self, pod: Pod, runtime_status: acts.RuntimePodStatus) -> bool:
        """Upstream's WaitForAttachAndMount in SyncPod: no container starts before every volume is set up; while it
        waits the pod shows ContainerCreating; a failure is a FailedMount event and a retry after upstream's pod
        worker back-off (10 s). A pod asked to terminate stops waiting without an event."""
        assert self.volumes is not None
        uid = _uid(pod)

        def publish_waiting() -> None:
            sandbox_ready = self._sandbox_ready(runtime_status)
            reasons = self._waiting(pod, runtime_status)
            self._publish(pod, self._generate(pod, runtime_status, reasons, sandbox_ready=sandbox_ready))

        try:
            self.volumes.make_pod_dirs(uid)
        except OSError as exc:
            # As upstream's SyncPod: an event and an error, and the pod worker tries again after its back-off; the
            # agent goes on (a full root dir ended the sync with a traceback and no word to the user, issue 34).
            message = f"error making pod data directories: {go_path_error('mkdir', exc)}"
            log.error("unable to make pod data directories pod=%s uid=%s error=%s", _ref(pod), uid, exc)
            self.record_event(pod, "Warning", "FailedToMakePodDataDirectories", message)
            publish_waiting()
            self._next_sync[uid] = self.monotonic() + VOLUME_RETRY_SECONDS
            return False

        try:
            await self.volumes.wait_for_attach_and_mount(
                pod, cancelled=lambda: self.workers.state(uid) is not WorkState.SYNCING, on_wait=publish_waiting
            )
        except VolumeWaitError as exc:
            if not exc.interrupted:
                log.warning("unable to attach or mount volumes pod=%s uid=%s error=%s", _ref(pod), uid, exc)
                self.record_event(pod, "Warning", "FailedMount", f"Unable to attach or mount volumes: {exc}")
                publish_waiting()
                self._next_sync[uid] = self.monotonic() + VOLUME_RETRY_SECONDS
            return False
        return True

    async def sync_terminating_pod(
        self, pod: Pod, status: PodStatus, grace_period: int, kill_reason: str | None
    ) -> None:
        uid = _uid(pod)
        if self.prober is not None:
            self.prober.stop_liveness_and_startup(uid)
        eviction = self._evictions.get(uid)
        # As upstream's SyncTerminatingPod: the status of the pod as it is before the kill is set first (with an
        # eviction's status function applied: Failed/Evicted), then the one after it. Its sandbox is still as it was
        # (an evicted pod's PodReadyToStartContainers turns False with the terminal status, not before: the
        # differential corpus's evict-storage-limit-* scenarios).
        runtime_before = self.runtime.runtime_status(status)
        before = self._generate(
            pod,
            runtime_before,
            self._waiting(pod, runtime_before),
            sandbox_ready=self._sandbox_ready(runtime_before),
            terminal=False,
        )
        if eviction is not None:
            before = eviction.apply(before, self.wall())
        elif self._past_active_deadline(pod):
            # As upstream's generateAPIPodStatus: the active deadline handler's verdict is part of every status.
            self._deadline_exceeded(pod, before, record=False)
        self._publish(pod, before)
        await self.runtime.kill_pod(pod, acts.from_pod_status(status), grace_period=grace_period)
        if self.prober is not None:
            self.prober.remove_pod(uid)
        if self.unprepare_resources is not None:
            # As upstream: after every container has stopped, before the status says so (the claims' deallocation
            # waits for the pod to be terminal).
            await self.unprepare_resources(pod)
        # Straight from the runtime, as upstream: nothing may still run once this returns. The stopped sandbox no
        # longer tells its IPs: the pod keeps those it had (upstream's preserveDataFromBeforeStopping).
        after = await self.runtime.get_pod_status(uid)
        after = dataclasses.replace(after, ips=acts.from_pod_status(status).ips)
        generated = self._generate(pod, after, None, sandbox_ready=False, terminal=True)
        if eviction is not None:
            generated = eviction.after_kill(generated, before)
        elif kill_reason:
            generated.update(phase="Failed", reason=kill_reason)
        elif self._past_active_deadline(pod):
            self._deadline_exceeded(pod, generated, record=False)
        self._publish(pod, generated)
        # Last, so the relist's time is past the end of this sync and answers the cleanup's wait at once.
        self.request_relist(uid)

    async def sync_terminated_pod(self, pod: Pod, status: PodStatus) -> None:
        # As upstream's status manager TerminatePod: a container that reported no end is marked failed
        # (ContainerStatusUnknown), and the pod ends in a terminal phase.
        last = self.status_manager.get_pod_status(_uid(pod))
        self._publish(
            pod,
            terminated_pod_status(pod.get("spec") or {}, last or pod.get("status") or {}, is_static=is_static_pod(pod)),
        )
        self._static_gate.finished(pod)
        self._next_sync.pop(_uid(pod), None)
        self._reasons.pop(_uid(pod), None)
        if self.volumes is not None:
            # As upstream's SyncTerminatedPod (WaitForUnmount): the containers are gone, so are the volumes.
            await self.volumes.unmount_pod(_uid(pod))
        wakeup = self._wakeups.pop(_uid(pod), None)
        if wakeup is not None:
            wakeup.cancel()
        if not _meta(pod).get("deletionTimestamp"):
            return  # finished (e.g. a completed Job): containers stay for logs until the pod is deleted
        await self.runtime.remove_pod(acts.from_pod_status(status))
        if self.client is None or _meta(pod).get("annotations", {}).get("kubernetes.io/config.source") != API_SOURCE:
            return
        try:
            await self.client.delete(
                paths.pod(str(_meta(pod)["namespace"]), str(_meta(pod)["name"])),
                grace_period_seconds=0,
                preconditions_uid=_uid(pod),
            )
        except NotFound:
            log.debug("pod already deleted from the apiserver pod=%s uid=%s", _ref(pod), _uid(pod))
            return
        except Conflict as exc:
            # The UID precondition failed: the name now belongs to a pod created since, so ours is already gone.
            log.info("pod already gone from the apiserver pod=%s uid=%s error=%s", _ref(pod), _uid(pod), exc)
            return
        log.info("pod deleted from the apiserver pod=%s uid=%s", _ref(pod), _uid(pod))

    # --- helpers -----------------------------------------------------------------------------------------------

    def _handle_mirror_pod(self, mirror: Pod) -> None:
        """A mirror pod changed, appeared or went away: sync its static pod, which puts the mirror right."""
        if self.mirror_pods is None:
            return
        for pod in self.mirror_pods.static_pods_of(mirror):
            if self.workers.state(_uid(pod)) is WorkState.SYNCING and _uid(pod) not in self._rejected:
                self.workers.update_pod(UpdatePodOptions(UpdateType.SYNC, pod))

    def _alive(self, uid: str) -> bool:
        return self.workers.state(uid) in (WorkState.SYNCING, WorkState.TERMINATING)

    def _active(self, pod: Mapping[str, Any]) -> bool:
        uid = _uid(pod)
        if uid in self._rejected or self.workers.state(uid) is None:
            return False
        published = self.status_manager.pod_status_view(uid) or pod.get("status") or {}
        return published.get("phase") not in TERMINAL_PHASES

    @staticmethod
    def _sandbox_ready(status: acts.RuntimePodStatus) -> bool:
        return any(s.state is acts.SandboxState.READY for s in status.sandboxes[:1])

    def _generate(
        self,
        pod: Pod,
        runtime_status: acts.RuntimePodStatus,
        reasons: Mapping[str, Waiting] | None,
        *,
        sandbox_ready: bool,
        terminal: bool = False,
    ) -> dict[str, Any]:
        spec = pod.get("spec") or {}
        # As upstream: container statuses and times continue the status last set (the status manager's); the
        # conditions others own (readiness gates) come from the pod as the apiserver shows it now.
        published = self.status_manager.get_pod_status(_uid(pod))
        current = self.pod_config.pod_by_uid(_uid(pod))
        base = dict(pod)
        if current is not None:
            base["status"] = current.get("status") or {}
        pod_ips = self._pod_ips(pod, runtime_status, None)
        limit = pod_message_budget(pod)
        prober = self.prober
        probes: ProbeView | None = None
        if prober is not None:

            def probes(name: str, container_id: str, running: bool) -> ContainerProbeStatus:
                return prober.container_probe_status(pod, name, container_id, running=running)

        resize_conditions: list[dict[str, Any]] = []
        if self.allocation is not None:
            if terminal:
                self.allocation.clear_for_terminal(_uid(pod))
            resize_conditions = self.allocation.resize_conditions(_uid(pod))
        actuated = self._actuated_memory_requests(pod)
        return generate_pod_status(
            base,
            now=self.wall(),
            containers=container_inputs(
                spec.get("containers") or [],
                runtime_status,
                reasons,
                probes,
                message_limit=limit,
                actuated_memory=actuated,
            ),
            init_containers=container_inputs(
                spec.get("initContainers") or [],
                runtime_status,
                reasons,
                probes,
                message_limit=limit,
                actuated_memory=actuated,
            ),
            # Ephemeral containers have no probes.
            ephemeral_containers=container_inputs(
                spec.get("ephemeralContainers") or [], runtime_status, reasons, None, message_limit=limit
            ),
            sandbox_ready=sandbox_ready,
            pod_ips=pod_ips,
            host_ips=self.host_ips,
            pod_is_terminal=terminal,
            runtime_type=self.runtime_type,
            old_status=published,
            supports_recursive_read_only=self.supports_recursive_read_only(pod),
            resize_conditions=resize_conditions,
        )

    def _actuated_memory_requests(self, pod: Pod) -> dict[str, str]:
        """Each container's memory request as last actuated, which upstream's status reports for running ones."""
        if self.allocation is None:
            return {}
        out = {}
        spec = pod.get("spec") or {}
        for container in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
            name = str(container.get("name", ""))
            record = self.allocation.get_actuated(_uid(pod), name)
            memory = ((record or {}).get("requests") or {}).get("memory")
            if memory is not None:
                out[name] = str(memory)
        return out

    async def _device_admit(self, pod: Pod) -> tuple[str, str] | None:
        # A pod the sysctls refuse is left to _admit_allocated, which says so: upstream checks them first.
        if self.device_admit is None or (self.sysctls is not None and self.sysctls.forbidden(pod) is not None):
            return None
        return await self.device_admit(pod)

    def _admit_allocated(self, pod: Pod, active: Sequence[Pod]) -> tuple[str, str] | None:
        """The admit handlers (after the eviction manager's) for `pod` among `active`, both as allocated; an
        admitted pod's allocation is recorded (upstream's allocation manager AddPod)."""

        def predicates(candidate: Mapping[str, Any], others: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
            # Without a Node (standalone) only the node-independent checks (sysctls) apply.
            found = self.node_for_admission(dict(candidate), self.node())
            node, pods = (dict(found) if found is not None else None), [dict(p) for p in others]
            verdict = admit(dict(candidate), node, pods, sysctls=self.sysctls)
            if not verdict.admit:  # a critical pod short of resources may preempt others instead
                verdict = self.preemption.handle_admission_failure(candidate, node, pods, verdict, sysctls=self.sysctls)
            return None if verdict.admit else (verdict.reason, verdict.message)

        if self.allocation is None:
            return predicates(pod, active)
        others = [self.allocation.allocated_pod(p) for p in active]
        refused = self.allocation.add_pod(pod, lambda allocated: predicates(allocated, others))
        if refused is None:
            self.allocation.backfill(pod)
            if self.allocation.update_pod_from_allocation(pod)[1]:
                self.allocation.push_pending_resize(_uid(pod))
        return refused

    def _resize_admit(self, pod: Mapping[str, Any], others: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
        """The admit handlers a resize must pass (upstream canAdmitPod): the eviction manager's, then the
        predicates, against the other pods as allocated."""
        refused = self.eviction_admit(dict(pod))
        if refused is not None:
            return refused
        verdict = admit(dict(pod), self.node(), [dict(p) for p in others], sysctls=self.sysctls)
        return None if verdict.admit else (verdict.reason, verdict.message)

    def _retry_resizes(self, trigger: str) -> None:
        """Upstream RetryPendingResizes: decide the pending resizes again; the pods whose resize was allocated or
        whose resize conditions changed sync now."""
        assert self.allocation is not None
        if not self.allocation.has_pending_resizes():
            return
        to_sync = self.allocation.retry_pending_resizes(
            trigger,
            pod_by_uid=self._resizable_pod,
            active_pods=self.active_pods,
            admit=self._resize_admit,
        )
        for uid in to_sync:
            self._resync(uid)

    def _resizable_pod(self, uid: str) -> Pod | None:
        if uid in self._rejected or self.workers.state(uid) is not WorkState.SYNCING:
            return None
        return self.pod_config.pod_by_uid(uid)

    def _pod_ips(self, pod: Pod, runtime_status: acts.RuntimePodStatus, result: SyncResult | None) -> tuple[str, ...]:
        if (pod.get("spec") or {}).get("hostNetwork"):
            return self.host_ips
        pod_ips = result.pod_ips if result is not None else ()
        if not pod_ips:
            pod_ips = runtime_status.ips
        return tuple(pod_ips)

    def _waiting(self, pod: Pod, runtime_status: acts.RuntimePodStatus) -> dict[str, Waiting]:
        """The remembered reasons that apply now: as upstream's convertToAPIContainerStatuses, only to a container
        that would be started again (not running, not done for its restart policy, the pod not being deleted)."""
        cached = self._reasons.get(_uid(pod))
        if not cached:
            return {}
        spec = pod.get("spec") or {}
        every = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        every += spec.get("ephemeralContainers") or []
        return {
            name: cached[name]
            for c in every
            if (name := str(c.get("name", ""))) in cached and acts.should_container_be_restarted(c, pod, runtime_status)
        }

    def _remember_reasons(self, uid: str, result: SyncResult) -> bool:
        """Upstream's reasonCache.Update after a sync: a failed start is remembered, a good one forgotten, the
        containers the sync did not try to start keep theirs. Whether anything changed."""
        before = self._reasons.get(uid, {})
        after = {name: w for name, w in before.items() if name not in result.started}
        after.update(result.waiting)
        if after:
            self._reasons[uid] = after
        else:
            self._reasons.pop(uid, None)
        return _reason_view(after) != _reason_view(before)

    def _publish(self, pod: Pod, status: dict[str, Any]) -> None:
        self.status_manager.set_pod_status(pod, status)

    def _past_active_deadline(self, pod: Mapping[str, Any]) -> bool:
        # Asked of every syncing pod every second: the kept status is read, not copied (copying it was 11% of a
        # 50-node fleet's CPU with 25 pods each, py-spy 2026-11-30).
        if (pod.get("spec") or {}).get("activeDeadlineSeconds") is None:
            return False
        return active_deadline.past_active_deadline(pod, self.status_manager.pod_status_view(_uid(pod)), self.wall())

    def _deadline_exceeded(self, pod: Pod, status: dict[str, Any], *, record: bool) -> None:
        """Upstream's active deadline handler (ShouldEvict): the pod fails with its reason and message, and its
        conditions say so (PodFailed) at once, as upstream decides the phase before generating them."""
        status.update(
            failed_pod_status(
                pod, status, reason=active_deadline.REASON, message=active_deadline.MESSAGE, now=self.wall()
            )
        )
        if record:
            deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
            log.info("pod past its active deadline pod=%s uid=%s deadline=%ss", _ref(pod), _uid(pod), deadline)
            self.record_event(pod, "Normal", active_deadline.REASON, active_deadline.MESSAGE)

    def _schedule(self, uid: str, result: SyncResult, deadline_in: float | None = None) -> None:
        # A back-off (crash loop, image pull) is looked at again exactly when it expires, and an active deadline
        # when it falls; other waits soon; otherwise the periodic resync.
        delay = self.sync_frequency
        if result.retry_after is None and result.waiting:
            delay = min(delay, 2.0)
        wake = min((t for t in (result.retry_after, deadline_in) if t is not None), default=None)
        if wake is not None:
            delay = min(delay, max(wake, 0.0))
            # Exactly then, not at the next 1 s tick (upstream's work queue does the same).
            handle = asyncio.get_running_loop().call_later(delay, self._resync, uid)
            old = self._wakeups.pop(uid, None)
            if old is not None:
                old.cancel()
            self._wakeups[uid] = handle
        self._next_sync[uid] = self.monotonic() + delay

    def _sync_failed(self, uid: str, exc: BaseException) -> None:
        """A worker's sync raised: as upstream's completeWork, the pod is due again after the pod workers' back-off
        (10-15 s) rather than at its next resync. A pod no source has any more is not due at all: housekeeping runs
        its worker again (`PodWorkers.sync_known_pods`)."""
        if self.pod_config.pod_view(uid) is None:
            log.info("pod sync failed, housekeeping retries uid=%s error=%s", uid, type(exc).__name__)
            return
        delay = backoff_after_error(self.rand)
        self._next_sync[uid] = self.monotonic() + delay
        log.info("pod sync failed, retrying uid=%s after=%.1fs error=%s", uid, delay, type(exc).__name__)

    def _resync(self, uid: str) -> None:
        self._wakeups.pop(uid, None)
        pod = self.pod_config.pod_by_uid(uid)
        if pod is not None and uid not in self._rejected:
            self.workers.update_pod(UpdatePodOptions(UpdateType.SYNC, pod))

    def evict_pod(self, pod: Pod, eviction: PodEviction, grace_period: int) -> None:
        """Upstream's killPodNow for the eviction manager: the pod's worker terminates it with that grace period,
        and its status becomes the eviction's (phase Failed, reason and message, DisruptionTarget)."""
        uid = _uid(pod)
        self._evictions[uid] = eviction
        self.workers.update_pod(
            UpdatePodOptions(UpdateType.KILL, pod, grace_period_override=grace_period, kill_reason=eviction.reason)
        )

    def evicted_by_kill(self, uid: str) -> bool:
        """Whether the pod's worker was told to terminate it as an eviction (upstream's podSyncStatus.IsEvicted),
        whatever phase it then ended in."""
        eviction = self._evictions.get(uid)
        return eviction is not None and eviction.evict

    def pod_cleaned_up(self, pod: Pod) -> bool:
        """For the eviction manager's wait after an eviction (upstream's podResourcesAreReclaimed): the pod's worker
        has finished terminating it (containers stopped, volumes torn down) or is gone."""
        return self.workers.state(_uid(pod)) in (None, WorkState.TERMINATED)

    def _reject(self, pod: Pod, reason: str, message: str) -> None:
        uid = _uid(pod)
        self._rejected.add(uid)
        log.info("pod rejected pod=%s uid=%s reason=%s message=%s", _ref(pod), uid, reason, message)
        self.record_event(pod, "Warning", reason, message)
        status = dict(pod.get("status") or {})
        status.update(phase="Failed", reason=reason, message=message)
        self.status_manager.set_pod_status(pod, status)
