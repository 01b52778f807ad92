"""The eviction manager wired into the agent (upstream pkg/kubelet/eviction/eviction_manager.go).

The decisions are `eviction`'s (pure); this module supplies their inputs and carries out their outcome:

- at start-up the thresholds are parsed from the config (`eviction_config`); a bad one stops the agent;
- every 10 s (upstream's housekeeping monitoring period; the clock is injected) `synchronize` reads the stats
  summary (the same provider that serves /stats/summary, as upstream's summary provider feeds its manager), turns it
  into observations (`observations_from_summary`, upstream's makeSignalObservations) and the pods' usage, and calls
  `eviction.decide`;
- the conditions it returns feed the node status (`pressure_conditions`) and admission (`admit`);
- a threshold met records upstream's `EvictionThresholdMet` node event, and at most one pod is evicted per cycle
  (as upstream): killed through `evict` with decide()'s grace period, its status Failed with reason `Evicted`
  and the message, and an `Evicted` event on the pod;
- before a pod is evicted for disk pressure, node-level resources are reclaimed as upstream's
  reclaimNodeLevelResources: each step decide() names (dead containers and sandboxes, then unused images, through
  `EvictionInputs.delete_all_unused_containers` / `delete_unused_images`), then the node is observed again, and when
  no threshold (with its minimum reclaim) is met any more no pod goes that cycle.
- a memory threshold notifier (nodeagent.memorynotifier, given to `run`) wakes the loop when a memory threshold is
  crossed, so the cycle runs at once rather than at the next tick; `run` re-arms it from the cycle's summary.

Not here yet (issue 17): the metrics.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import ROUND_CEILING
from pathlib import Path
from typing import Any

from cri.v1 import api_pb2
from eviction.decide import Decision, EvictionConfig, History, decide, reclaim_relieved
from eviction.disks import DiskLayout, NodeReclaim, layout_from_devices
from eviction.injection import Injector
from eviction.messages import REASON, THRESHOLD_MET_EVENT_REASON, admit, threshold_met_event_message
from eviction.notify import refresh_due
from eviction.pods import ContainerInfo, ContainerUsage, FsUsage, PodInfo, PodUsage, QOSClass, Toleration
from eviction.quantity import ZERO, Quantity
from eviction.result import Eviction
from eviction.signals import (
    NodeCondition,
    Observation,
    Signal,
    fs_observations,
    memory_observation,
    pid_observation,
)
from eviction.thresholds import parse_thresholds
from nodeagent.admission.resources import resource_request
from nodeagent.clock import Clock
from nodeagent.config import KubeletConfiguration
from nodeagent.config.durations import parse_go_duration
from nodeagent.config.quantity import parse_quantity
from nodeagent.evictionmetrics import EvictionMetrics
from nodeagent.kuberuntime.qos import pod_qos
from nodeagent.memoryevents import memory_events_notifiers
from nodeagent.memorynotifier import NotifierError, ThresholdNotifier, memory_notifiers
from nodeagent.podconfig.storage import pod_ref as _pod_ref
from nodeagent.staticpods import is_mirror_pod, is_static_pod
from nodeagent.stats.cgroups import CGROUP_ROOT
from nodeagent.stats.types import FsStats, PodStats, Summary

log = logging.getLogger(__name__)

Pod = dict[str, Any]

# As upstream's kubelet: the eviction manager's housekeeping (evictionMonitoringPeriod) is 10 s.
MONITORING_PERIOD_SECONDS = 10.0
PODS_CONTAINER = "pods"  # the summary's system container for the kubepods cgroup
# Notified cycles start at least this far apart: usage hovering at a threshold makes the kernel signal every crossing,
# and each cycle reads a whole summary.
MIN_NOTIFIED_INTERVAL_SECONDS = 0.25
# As upstream (podCleanupTimeout, podCleanupPollFreq): after an eviction the loop waits up to 30 s, checking every
# second, for the evicted pods to be cleaned up, so the next cycle sees the memory or disk they freed.
POD_CLEANUP_TIMEOUT_SECONDS = 30.0
POD_CLEANUP_POLL_SECONDS = 1.0


def eviction_config(config: KubeletConfiguration) -> EvictionConfig:
    """The thresholds and periods in force. Raises `eviction.thresholds.ThresholdError` (each problem as
    `evictionHard: <signal>: <problem>`)."""
    thresholds = parse_thresholds(
        hard=config.eviction_hard,
        soft=config.eviction_soft,
        soft_grace_period=config.eviction_soft_grace_period,
        minimum_reclaim=config.eviction_minimum_reclaim,
        enforce_node_allocatable=config.enforce_node_allocatable,
        parse_quantity=parse_quantity,
        parse_duration=parse_go_duration,
    )
    return EvictionConfig(
        thresholds=thresholds,
        pressure_transition_period=config.eviction_pressure_transition_period,
        max_pod_grace_period_seconds=config.eviction_max_pod_grace_period,
    )


# --- observations and pods, from the summary and the pod objects (pure) ----------------------------------------


def configured_notifiers(config: KubeletConfiguration, *, mount: Path = CGROUP_ROOT) -> list[ThresholdNotifier]:
    """The memory threshold notifiers `run` is given: none unless kernelMemcgNotification is true (upstream's default
    is false, and so is ours: the manager then polls every 10 s only). On cgroup v2, the PSI triggers and, beyond
    upstream, the pods cgroup's memory.events."""
    if not config.kernel_memcg_notification:
        return []
    thresholds = eviction_config(config).thresholds
    root, driver = config.cgroup_root, config.cgroup_driver.value
    return memory_notifiers(thresholds, cgroup_root=root, cgroup_driver=driver, mount=mount) + (
        memory_events_notifiers(thresholds, cgroup_root=root, cgroup_driver=driver, mount=mount)
    )


def _fs(
    bytes_signal: Signal, inodes_signal: Signal, fs: FsStats | None, time: datetime | None
) -> dict[Signal, Observation]:
    if fs is None:
        return {}
    return fs_observations(
        bytes_signal,
        inodes_signal,
        available_bytes=fs.available_bytes,
        capacity_bytes=fs.capacity_bytes,
        inodes_free=fs.inodes_free,
        inodes=fs.inodes,
        time=fs.time or time,
    )


def observations_from_summary(summary: Summary, allocatable_memory: int | None = None) -> dict[Signal, Observation]:
    """Upstream's makeSignalObservations: memory.available from the node's memory (available + working set is the
    capacity), allocatableMemory.available from the kubepods cgroup against allocatable, nodefs from the root dir's
    filesystem, imagefs and containerfs from the runtime's ImageFsInfo, pid.available from the pid limit."""
    node = summary.node
    result: dict[Signal, Observation] = {}
    memory = node.memory
    if memory is not None and memory.available_bytes is not None and memory.working_set_bytes is not None:
        result[Signal.MEMORY_AVAILABLE] = Observation(
            available=memory.available_bytes,
            capacity=memory.available_bytes + memory.working_set_bytes,
            time=memory.time,
        )
    pods = next((c for c in node.system_containers if c.name == PODS_CONTAINER), None)
    if allocatable_memory is not None and pods is not None and pods.memory is not None:
        working_set = pods.memory.working_set_bytes
        if working_set is not None:
            result[Signal.ALLOCATABLE_MEMORY_AVAILABLE] = memory_observation(
                allocatable_memory, working_set, pods.memory.time
            )
    time = memory.time if memory is not None else None
    result.update(_fs(Signal.NODEFS_AVAILABLE, Signal.NODEFS_INODES_FREE, node.fs, time))
    if node.runtime is not None:
        result.update(_fs(Signal.IMAGEFS_AVAILABLE, Signal.IMAGEFS_INODES_FREE, node.runtime.image_fs, time))
        result.update(
            _fs(Signal.CONTAINERFS_AVAILABLE, Signal.CONTAINERFS_INODES_FREE, node.runtime.container_fs, time)
        )
    rlimit = node.rlimit
    if rlimit is not None and rlimit.max_pid is not None and rlimit.num_of_running_processes is not None:
        result[Signal.PID_AVAILABLE] = pid_observation(rlimit.max_pid, rlimit.num_of_running_processes, rlimit.time)
    return result


def _fs_usage(fs: FsStats | None) -> FsUsage | None:
    return None if fs is None else FsUsage(used_bytes=fs.used_bytes, inodes_used=fs.inodes_used)


def pod_usage(stats: PodStats) -> PodUsage:
    return PodUsage(
        memory_working_set=stats.memory.working_set_bytes if stats.memory is not None else None,
        process_count=stats.process_stats.process_count if stats.process_stats is not None else None,
        containers=tuple(
            ContainerUsage(
                name=c.name,
                memory_working_set=c.memory.working_set_bytes if c.memory is not None else None,
                rootfs=_fs_usage(c.rootfs),
                logs=_fs_usage(c.logs),
            )
            for c in stats.containers
        ),
        volumes={v.name: FsUsage(used_bytes=v.fs.used_bytes, inodes_used=v.fs.inodes_used) for v in stats.volume_stats},
        ephemeral_storage_used=stats.ephemeral_storage.used_bytes if stats.ephemeral_storage is not None else None,
    )


def usage_from_summary(summary: Summary) -> dict[str, PodUsage]:
    return {p.pod_ref.uid: pod_usage(p) for p in summary.pods}


def _quantity(value: Any) -> Quantity | None:
    """An API quantity as eviction keeps it: the whole amount (rounded up, as Value()) and the text as written."""
    if value is None:
        return None
    text = str(value)
    try:
        amount = parse_quantity(text)
    except ValueError:
        return None
    return Quantity(int(amount.to_integral_value(rounding=ROUND_CEILING)), text)


def _request(container: Mapping[str, Any], name: str) -> Quantity:
    return _quantity(((container.get("resources") or {}).get("requests") or {}).get(name)) or ZERO


def _request_value(pod: Mapping[str, Any], name: str) -> int:
    """Upstream GetResourceRequestQuantity's Value(), rounded up (nodeagent.admission.resources)."""
    return int(resource_request(pod, name).to_integral_value(rounding=ROUND_CEILING))


def _limit(container: Mapping[str, Any], name: str) -> Quantity | None:
    return _quantity(((container.get("resources") or {}).get("limits") or {}).get(name))


def _sum(left: Quantity | None, right: Quantity | None) -> Quantity | None:
    if left is None or right is None:
        return left if right is None else right
    return left.plus(right)


def _larger(current: Quantity | None, candidate: Quantity | None) -> Quantity | None:
    if candidate is None or (current is not None and candidate.value <= current.value):
        return current
    return candidate


def _pod_limit(spec: Mapping[str, Any], name: str) -> Quantity | None:
    """Upstream's PodLimits for a resource that pod-level resources do not cover (ephemeral-storage): the regular and
    sidecar containers' limits summed, at least each init container's own limit plus the sidecars started before
    it, plus the overhead when the sum is not zero; None when no container sets one (upstream's "not found")."""
    total: Quantity | None = None
    for container in spec.get("containers") or ():
        total = _sum(total, _limit(container, name))
    sidecars: Quantity | None = None
    init_peak: Quantity | None = None
    for container in spec.get("initContainers") or ():
        own = _limit(container, name)
        if container.get("restartPolicy") == "Always":
            total = _sum(total, own)
            sidecars = _sum(sidecars, own)
            init_peak = _larger(init_peak, sidecars)
        else:
            init_peak = _larger(init_peak, _sum(own, sidecars))
    total = _larger(total, init_peak)
    overhead = _quantity((spec.get("overhead") or {}).get(name))
    if total is not None and total.value != 0 and overhead is not None:
        total = total.plus(overhead)
    return total


def pod_info(pod: Mapping[str, Any]) -> PodInfo:
    """What the decisions need of a pod object."""
    meta: Mapping[str, Any] = pod.get("metadata") or {}
    spec: Mapping[str, Any] = pod.get("spec") or {}
    containers = [
        ContainerInfo(
            name=str(c.get("name", "")),
            init=init,
            memory_request=_request(c, "memory"),
            ephemeral_storage_request=_request(c, "ephemeral-storage"),
            ephemeral_storage_limit=_quantity(
                ((c.get("resources") or {}).get("limits") or {}).get("ephemeral-storage")
            ),
        )
        for init, group in ((True, spec.get("initContainers") or ()), (False, spec.get("containers") or ()))
        for c in group
    ]
    volumes = spec.get("volumes") or ()
    local = tuple(
        str(v.get("name", ""))
        for v in volumes
        if ("emptyDir" in v and (v.get("emptyDir") or {}).get("medium") != "Memory") or "hostPath" in v
    )
    size_limits = {
        str(v.get("name", "")): q
        for v in volumes
        if "emptyDir" in v and (q := _quantity((v.get("emptyDir") or {}).get("sizeLimit"))) is not None
    }
    grace = spec.get("terminationGracePeriodSeconds")
    priority = spec.get("priority")
    return PodInfo(
        uid=str(meta.get("uid", "")),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        qos=QOSClass(pod_qos(pod).value),
        priority=priority if isinstance(priority, int) else 0,
        static=is_static_pod(dict(pod)),
        mirror=is_mirror_pod(dict(pod)),
        memory_request=_request_value(pod, "memory"),
        ephemeral_storage_request=_request_value(pod, "ephemeral-storage"),
        pod_level_memory_request=_quantity(((spec.get("resources") or {}).get("requests") or {}).get("memory")),
        ephemeral_storage_limit=_pod_limit(spec, "ephemeral-storage"),
        containers=tuple(containers),
        local_volumes=local,
        empty_dir_size_limits=size_limits,
        termination_grace_period_seconds=grace if isinstance(grace, int) else None,
        tolerations=tuple(
            Toleration(
                key=str(t.get("key") or ""),
                operator=str(t.get("operator") or "Equal"),
                value=str(t.get("value") or ""),
                effect=str(t.get("effect") or ""),
            )
            for t in spec.get("tolerations") or ()
        ),
    )


# --- the disk layout ---------------------------------------------------------------------------------------------


def _device(path: str) -> int | None:
    try:
        return os.stat(path).st_dev if path else None
    except OSError:
        return None


async def disk_layout(image_fs_info: Callable[[], Awaitable[api_pb2.ImageFsInfoResponse]], root_dir: str) -> DiskLayout:
    """Whether the runtime keeps images (and writable layers) on a filesystem of their own, from the devices of
    ImageFsInfo's mountpoints and the root dir's, as upstream's HasDedicatedImageFs. A runtime that cannot say is
    taken as one disk (logged)."""
    try:
        info = await image_fs_info()
    except Exception as exc:  # the runtime's failure must not stop the agent; one disk is the common case
        log.warning("eviction disk layout unknown, assuming one filesystem error=%s", exc)
        return DiskLayout()
    image = next((fs.fs_id.mountpoint for fs in info.image_filesystems), "")
    container = next((fs.fs_id.mountpoint for fs in info.container_filesystems), "")
    layout = layout_from_devices(_device(root_dir), _device(image), _device(container) if container else None)
    log.info(
        "eviction disk layout dedicated_image_fs=%s split_container_image_fs=%s imagefs=%s",
        layout.dedicated_image_fs,
        layout.split_container_image_fs,
        image or "-",
    )
    return layout


# --- the manager ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdmitRefusal:
    reason: str
    message: str


# Kill one pod: the pod object and the eviction (grace period, message, whether it is a DisruptionTarget).
EvictFn = Callable[[Pod, Eviction], None]


def _no_node_event(type_: str, reason: str, message: str) -> None:
    del type_, reason, message


def _no_pod_event(pod: Pod, type_: str, reason: str, message: str, annotations: Mapping[str, str]) -> None:
    del pod, type_, reason, message, annotations


def _no_allocatable() -> int | None:
    return None


@dataclass(frozen=True)
class EvictionInputs:
    """What a cycle reads and acts through; bound once the kubelet exists (the manager itself is made earlier, as
    the node status and admission ask it for its conditions)."""

    summary: Callable[[], Awaitable[Summary]]
    # The pods as stored, only read: the one evicted is copied (copying every pod at every cycle was 6% of a
    # 50-node fleet's CPU with 25 pods each, py-spy 2026-11-30).
    active_pods: Callable[[], Sequence[Mapping[str, Any]]]
    evict: EvictFn
    record_node_event: Callable[[str, str, str], None] = _no_node_event
    # (pod, type, reason, message, annotations): the Evicted event carries upstream's annotations.
    record_pod_event: Callable[[Pod, str, str, str, Mapping[str, str]], None] = _no_pod_event
    allocatable_memory: Callable[[], int | None] = _no_allocatable
    # Node-level reclaim (upstream's containerGC.DeleteAllUnusedContainers and imageGC.DeleteUnusedImages); None:
    # not wired, that step is skipped. Each may raise: the error is logged and eviction goes on.
    delete_all_unused_containers: Callable[[], Awaitable[None]] | None = None
    delete_unused_images: Callable[[], Awaitable[None]] | None = None
    # Upstream's podCleanedUpFunc (podResourcesAreReclaimed): the evicted pod's containers stopped and its
    # resources released.
    pod_cleaned_up: Callable[[Pod], bool] = lambda pod: True


class EvictionManager:
    """Holds the history between cycles and the conditions last decided; `run()` is the monitoring loop."""

    # Set by `nodeagent run --eviction-signal-injection` (experiments): replaces observed signals before deciding.
    injector: Injector | None = None

    def __init__(
        self,
        config: EvictionConfig,
        *,
        clock: Clock,
        period: float = MONITORING_PERIOD_SECONDS,
        metrics: EvictionMetrics | None = None,
    ) -> None:
        self._config = config
        self._clock = clock
        self._period = period
        self._history = History()
        self.last_decision: Decision | None = None
        self.metrics = metrics if metrics is not None else EvictionMetrics()
        self.evicted: list[Pod] = []  # the pods the last cycle evicted

    def restore_conditions(self, node: Mapping[str, Any] | None, now: datetime) -> frozenset[str]:
        """At start, before the first cycle: the pressure conditions the Node shows True (a restart under pressure)
        are held as if observed now, so the node status does not flip them to False while the first observation is
        pending, and they last at least the transition period, as if the agent had never stopped. Upstream starts
        with none; the agent keeps no state of its own, so the Node is where this one is rebuilt from. Returns what
        was restored."""
        known = {str(c): c for c in NodeCondition}
        found = [
            known[str(c.get("type"))]
            for c in ((node or {}).get("status") or {}).get("conditions") or ()
            if str(c.get("type")) in known and c.get("status") == "True"
        ]
        if found:
            self._history = replace(
                self._history,
                node_conditions=tuple(found),
                node_conditions_last_observed_at={
                    **self._history.node_conditions_last_observed_at,
                    **dict.fromkeys(found, now),
                },
            )
            log.info("eviction node conditions restored from the node conditions=%s", ",".join(sorted(found)))
        return frozenset(str(c) for c in found)

    def use_disk_layout(self, layout: DiskLayout) -> None:
        """Set once the runtime is known: which usage counts for each disk signal and what the node frees first."""
        self._config = replace(self._config, layout=layout)

    def pressure_conditions(self) -> frozenset[str]:
        """The node conditions under pressure now (held for the transition period), for the node status."""
        return frozenset(str(c) for c in self._history.node_conditions)

    def admit(self, pod: Mapping[str, Any]) -> AdmitRefusal | None:
        """Upstream's eviction admit handler: None to admit, else why not."""
        verdict = admit(pod_info(pod), list(self._history.node_conditions))
        return None if verdict.admit else AdmitRefusal(verdict.reason, verdict.message)

    async def synchronize(self, inputs: EvictionInputs) -> Decision:
        """One cycle: observe, decide, evict at most one pod (or every pod over a local storage limit)."""
        self.evicted = []
        summary = await inputs.summary()
        observations = observations_from_summary(summary, inputs.allocatable_memory())
        if self.injector is not None:
            observations = self.injector.apply(observations, self._clock.wall())
        pods = {str((p.get("metadata") or {}).get("uid", "")): p for p in inputs.active_pods()}
        infos = [pod_info(p) for p in pods.values()]
        before = set(self._history.node_conditions)
        decision = decide(
            config=self._config,
            observations=observations,
            history=self._history,
            pods=infos,
            usage=usage_from_summary(summary),
            now=self._clock.wall(),
        )
        self._history = decision.history
        self.last_decision = decision
        after = set(decision.node_conditions)
        if before != after:
            log.info(
                "eviction node conditions changed conditions=%s",
                ",".join(sorted(str(c) for c in after)) or "none",
            )
        for eviction in decision.local_storage_evictions:
            self._carry_out(inputs, pods, eviction)
        if decision.local_storage_evictions or decision.threshold_to_reclaim is None:
            return decision
        resource = decision.resource_to_reclaim
        log.warning(
            "eviction manager attempting to reclaim resource=%s threshold=%s", resource, decision.threshold_to_reclaim
        )
        if resource is not None:
            inputs.record_node_event("Warning", THRESHOLD_MET_EVENT_REASON, threshold_met_event_message(resource))
        if await self._reclaim_node_level_resources(inputs, decision):
            log.info("eviction manager: able to reduce resource pressure without evicting pods resource=%s", resource)
            return decision
        if decision.node_reclaim:
            log.info("eviction manager: must evict pod(s) to reclaim resource=%s", resource)
        if decision.victim is None:
            # As upstream: with no active pod there is nothing to rank; otherwise every ranked pod was critical.
            if not pods:
                log.error("eviction manager thresholds have been met, but no pods are active to evict")
            else:
                log.error("eviction manager unable to evict any pods from the node")
            return decision
        # As upstream: the age of the stats behind each threshold acted on (kubelet_eviction_stats_age_seconds).
        now = self._clock.wall()
        for threshold in decision.starved:
            observed = decision.history.last_observations.get(threshold.signal)
            self.metrics.stats_observed(str(threshold.signal), observed.time if observed is not None else None, now)
        self._carry_out(inputs, pods, decision.victim)
        return decision

    async def _reclaim_node_level_resources(self, inputs: EvictionInputs, decision: Decision) -> bool:
        """Upstream's reclaimNodeLevelResources: every reclaim step for the signal, then one fresh observation;
        True when it meets no threshold any more (minimum reclaim included, grace periods ignored)."""
        steps = {
            NodeReclaim.CONTAINERS: inputs.delete_all_unused_containers,
            NodeReclaim.IMAGES: inputs.delete_unused_images,
        }
        wired = [(step, fn) for step in decision.node_reclaim if (fn := steps.get(step)) is not None]
        if not wired:
            return False
        for step, reclaim in wired:
            try:
                await reclaim()
            except Exception as exc:  # as upstream: logged, the next step and the re-observation still happen
                log.info(
                    "eviction manager: unexpected error when attempting to reduce resource pressure resource=%s "
                    "step=%s error=%s",
                    decision.resource_to_reclaim,
                    step,
                    exc,
                )
        try:
            summary = await inputs.summary()
        except Exception as exc:
            log.error("eviction manager: failed to get summary stats after resource reclaim error=%s", exc)
            return False
        observations = observations_from_summary(summary, inputs.allocatable_memory())
        if self.injector is not None:
            observations = self.injector.apply(observations, self._clock.wall())
        if reclaim_relieved(self._config, observations):
            return True
        threshold = decision.threshold_to_reclaim
        observed = observations.get(threshold.signal) if threshold is not None else None
        # Upstream logs these at V(3) ("observations after resource reclaim"); here they say why a pod still goes.
        log.info(
            "eviction manager: thresholds still met after resource reclaim signal=%s available=%s",
            threshold.signal if threshold is not None else "",
            observed.available if observed is not None else "unknown",
        )
        return False

    def _carry_out(self, inputs: EvictionInputs, pods: Mapping[str, Mapping[str, Any]], eviction: Eviction) -> None:
        view = pods.get(eviction.pod.uid)
        if view is None:
            return
        pod: Pod = copy.deepcopy(dict(view))
        log.info(
            "eviction manager evicting pod pod=%s uid=%s signal=%s rank=%s grace=%d message=%s",
            eviction.pod.ref,
            eviction.pod.uid,
            eviction.signal,
            "-" if eviction.rank is None else eviction.rank,
            eviction.grace_period_seconds,
            eviction.message,
        )
        # As upstream's evictPod: the event first (annotated with the offending containers, their usage and the
        # starved resource), then the kill with the status Failed/Evicted; kubelet_evictions counts it.
        inputs.record_pod_event(pod, "Warning", REASON, eviction.message, eviction.annotations)
        inputs.evict(pod, eviction)
        self.metrics.evicted(eviction.signal)
        self.evicted.append(pod)

    async def run(self, inputs: EvictionInputs, notifiers: Sequence[ThresholdNotifier] = ()) -> None:
        """A cycle every period; after a cycle that evicted, the next one as soon as the evicted pods are cleaned up
        (upstream's Start loop); or at once when a memory threshold notifier fires (upstream's thresholdHandler,
        which synchronizes from the notifier; here the loop is woken, so two cycles never overlap). After a cycle
        the notifiers are re-armed from its summary: every 10 s as upstream, and also after a notified cycle. The
        kernel watches usage, not the working set, so a notification can come from the inactive file cache moving;
        the kernel, then above its old threshold, would stay silent at the real crossing until the next re-arm."""
        wake = asyncio.Event()

        def notified(message: str) -> None:
            log.info("eviction manager memory notification message=%s", message)
            wake.set()

        last: list[Summary] = []

        async def summary() -> Summary:
            read = await inputs.summary()
            last[:] = [read]
            return read

        watched = replace(inputs, summary=summary)
        updated: float | None = None
        for notifier in notifiers:
            notifier.start(notified)
        try:
            while True:
                notified_cycle = wake.is_set()
                wake.clear()  # a notification during the cycle below calls for one more cycle
                started = self._clock.monotonic()
                last.clear()
                try:
                    await self.synchronize(watched)
                except Exception as exc:  # a failed observation must not end eviction: the next cycle tries again
                    log.warning("eviction manager synchronize failed error=%s", exc)
                evicted = bool(self.evicted)
                if evicted:
                    # As upstream's Start loop: no next cycle (nor a notified one) until the evicted pods are cleaned
                    # up, and then the next cycle at once, not after a period: upstream reads the node's stats fresh
                    # in each synchronize (updateStats, cAdvisor's MaxAge 0), so under a lasting pressure it evicts
                    # one pod per cleanup. Measured on one testbed (threshold above what the node has, four
                    # Burstable pods): the upstream kubelet evicted them 3.3-3.7 s apart.
                    await self._wait_for_cleanup(inputs, self.evicted)
                    wake.clear()
                if notifiers and last and (notified_cycle or refresh_due(updated, self._clock.monotonic())):
                    updated = self._clock.monotonic()
                    for notifier in notifiers:
                        try:
                            notifier.update(last[0], inputs.allocatable_memory())
                        except NotifierError as exc:  # as upstream (at info): polling still runs; retried later
                            log.info(
                                "eviction manager failed to update notifier notifier=%s error=%s",
                                notifier.description,
                                exc,
                            )
                if evicted:
                    continue
                if not notifiers:
                    # nothing but a notifier sets `wake`: a plain sleep, without the two tasks a wait on both takes
                    # (a tenth of an idle cycle's cost, 100 cycles a second in a 1,000-node fleet)
                    await self._clock.sleep(self._period)
                    continue
                await self._next_cycle(wake)
                if wake.is_set():
                    gap = MIN_NOTIFIED_INTERVAL_SECONDS - (self._clock.monotonic() - started)
                    if gap > 0:
                        await self._clock.sleep(gap)
        finally:
            for notifier in notifiers:
                notifier.stop()

    async def _wait_for_cleanup(self, inputs: EvictionInputs, pods: Sequence[Pod]) -> None:
        names = ",".join(f"{_pod_ref(p)}" for p in pods)
        log.info("eviction manager pods evicted, waiting for pod to be cleaned up pods=%s", names)
        deadline = self._clock.monotonic() + POD_CLEANUP_TIMEOUT_SECONDS
        while self._clock.monotonic() < deadline:
            await self._clock.sleep(POD_CLEANUP_POLL_SECONDS)
            if all(inputs.pod_cleaned_up(p) for p in pods):
                log.info("eviction manager pods successfully cleaned up pods=%s", names)
                return
        log.info("eviction manager timed out waiting for pods to be cleaned up pods=%s", names)

    async def _next_cycle(self, wake: asyncio.Event) -> None:
        """The period on the injected clock, or a notification, whichever comes first."""
        sleeping = asyncio.ensure_future(self._clock.sleep(self._period))
        woken = asyncio.ensure_future(wake.wait())
        try:
            await asyncio.wait((sleeping, woken), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeping, woken):
                task.cancel()
            await asyncio.gather(sleeping, woken, return_exceptions=True)


__all__ = [
    "MONITORING_PERIOD_SECONDS",
    "AdmitRefusal",
    "EvictionInputs",
    "EvictionManager",
    "configured_notifiers",
    "eviction_config",
    "observations_from_summary",
    "pod_info",
    "pod_usage",
    "usage_from_summary",
]
