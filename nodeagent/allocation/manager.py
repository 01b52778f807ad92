"""The allocation manager (upstream pkg/kubelet/allocation: `manager`), beside admission because admission counts
what is allocated, not what the spec asks for.

It keeps the allocated and actuated resources of every pod's containers (`state.ResourceState`, checkpointed under
the root dir), the pod's resize conditions (upstream keeps these in its status manager: PodResizePending with reason
Deferred or Infeasible, PodResizeInProgress with reason Error on a failed actuation), and the queue of pending
resizes. The Kubelet calls it:

- at admission (`add_pod`): the pod as allocated (after a restart, its checkpointed allocation wins over a spec a
  resize changed meanwhile) is what the admit handlers see, and its allocation is recorded once admitted;
- on a pod update whose spec differs from its allocation (`push_pending_resize` + `retry_pending_resizes`), on pod
  removal, and on a timer (first retry 30 s after start, then every 3 min, as upstream's ticker): each pending
  resize is decided again (`resize.decide_resize`), a Deferred one stays queued;
- in each pod sync (`check_resize_in_progress`): once no running container is left whose actuated resources differ
  from its allocation, PodResizeInProgress is cleared and a `ResizeCompleted` event is recorded.

Decisions are `resize.py`'s; this module holds state and time (injected).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeagent.allocation import resize
from nodeagent.allocation.state import ACTUATED_PODS_STATE, ALLOCATED_PODS_STATE, ResourceState
from nodeagent.kuberuntime.qos import QOSClass, compute_pod_qos
from nodeagent.status._common import format_time, pod_generation

log = logging.getLogger(__name__)

Pod = Mapping[str, Any]
INITIAL_RETRY_SECONDS = 30.0
RETRY_SECONDS = 180.0

TRIGGER_POD_RESIZED = "pod_resized"
TRIGGER_POD_UPDATED = "pod_updated"
TRIGGER_PODS_ADDED = "pods_added"
TRIGGER_PODS_REMOVED = "pods_removed"
TRIGGER_PERIODIC = "periodic_retry"


def _uid(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


def _ref(pod: Pod) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


@dataclass
class _Conditions:
    pending: dict[str, Any] | None = None
    in_progress: dict[str, Any] | None = None

    def as_list(self) -> list[dict[str, Any]]:
        return [dict(c) for c in (self.pending, self.in_progress) if c is not None]


def _condition(
    kind: str, old: Mapping[str, Any] | None, reason: str, message: str, *, generation: int, now: datetime.datetime
) -> dict[str, Any]:
    """Upstream updatedPodResizeCondition: probed now; the transition time kept while the reason stays."""
    stamp = format_time(now)
    transition = stamp if old is None or old.get("reason", "") != reason else old.get("lastTransitionTime", stamp)
    out: dict[str, Any] = {"type": kind, "status": "True", "lastProbeTime": stamp, "lastTransitionTime": transition}
    if generation:
        out["observedGeneration"] = generation
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


@dataclass
class AllocationManager:
    # The root dir the checkpoints live in; None keeps them in memory (unit tests).
    root_dir: str | None
    # The node's allocatable before eviction thresholds (capacity less system/kube reserved).
    allocatable: Mapping[str, str]
    wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)
    monotonic: Callable[[], float] = lambda: 0.0
    record_event: Callable[[Pod, str, str, str], None] = lambda pod, type_, reason, message: None
    cpu_manager_policy: str = "none"
    memory_manager_policy: str = "None"
    allocated: ResourceState = field(init=False)
    actuated: ResourceState = field(init=False)
    _conditions: dict[str, _Conditions] = field(default_factory=dict)
    _pending: list[str] = field(default_factory=list)
    _next_retry: float = field(init=False)

    def __post_init__(self) -> None:
        self.allocated = ResourceState(self.root_dir, ALLOCATED_PODS_STATE)
        self.actuated = ResourceState(self.root_dir, ACTUATED_PODS_STATE)
        self._next_retry = self.monotonic() + INITIAL_RETRY_SECONDS

    # --- allocation ------------------------------------------------------------------------------------------------

    def update_pod_from_allocation(self, pod: Pod) -> tuple[Pod, bool]:
        return resize.update_pod_from_allocation(pod, self.allocated.get_pod(_uid(pod)))

    def allocated_pod(self, pod: Pod) -> dict[str, Any]:
        return dict(self.update_pod_from_allocation(pod)[0])

    def set_allocated(self, pod: Pod) -> None:
        self.allocated.set_pod(_uid(pod), resize.allocation_from_pod(pod))

    def add_pod(self, pod: Pod, admit: Callable[[Pod], tuple[str, str] | None]) -> tuple[str, str] | None:
        """Upstream AddPod: admit the pod as allocated; once admitted, record its allocation. None when admitted."""
        allocated, _ = self.update_pod_from_allocation(pod)
        refused = admit(allocated)
        if refused is None:
            self.set_allocated(allocated)
        return refused

    def set_actuated(self, uid: str, name: str, resources: Mapping[str, Any]) -> None:
        self.actuated.set_container(uid, name, resources)

    def get_actuated(self, uid: str, name: str) -> dict[str, Any] | None:
        return self.actuated.get_container(uid, name)

    def remove_pod(self, uid: str) -> None:
        self.allocated.remove_pod(uid)
        self.actuated.remove_pod(uid)
        self._conditions.pop(uid, None)
        self._pending = [u for u in self._pending if u != uid]

    def remove_orphans(self, remaining: set[str]) -> None:
        self.allocated.remove_orphans(remaining)
        self.actuated.remove_orphans(remaining)
        for uid in [u for u in self._conditions if u not in remaining]:
            del self._conditions[uid]

    # --- resize conditions (upstream keeps these in the status manager) ----------------------------------------------

    def resize_conditions(self, uid: str) -> list[dict[str, Any]]:
        found = self._conditions.get(uid)
        return found.as_list() if found is not None else []

    def set_pending(self, uid: str, reason: str, message: str, generation: int) -> None:
        entry = self._conditions.setdefault(uid, _Conditions())
        entry.pending = _condition(
            resize.POD_RESIZE_PENDING, entry.pending, reason, message, generation=generation, now=self.wall()
        )

    def clear_pending(self, uid: str) -> None:
        entry = self._conditions.get(uid)
        if entry is not None:
            entry.pending = None

    def set_in_progress(self, uid: str, reason: str, message: str, generation: int) -> None:
        """As upstream: the reason and message stay when none is given, and the observedGeneration is kept (the
        condition has to be cleared to take a new one)."""
        entry = self._conditions.setdefault(uid, _Conditions())
        old = entry.in_progress
        if old is not None:
            if not reason and not message:
                reason, message = str(old.get("reason", "")), str(old.get("message", ""))
            generation = int(old.get("observedGeneration", 0))
        entry.in_progress = _condition(
            resize.POD_RESIZE_IN_PROGRESS, old, reason, message, generation=generation, now=self.wall()
        )

    def clear_in_progress(self, uid: str) -> bool:
        entry = self._conditions.get(uid)
        if entry is None or entry.in_progress is None:
            return False
        entry.in_progress = None
        return True

    def clear_for_terminal(self, uid: str) -> None:
        """Upstream determinePodResizeStatus for a terminal pod: no resize conditions."""
        self._conditions.pop(uid, None)

    def pending_reason(self, uid: str) -> str:
        entry = self._conditions.get(uid)
        return str(entry.pending.get("reason", "")) if entry is not None and entry.pending is not None else ""

    def backfill(self, pod: Pod) -> None:
        """Upstream BackfillPodResizeConditions: after a restart, the resize conditions the apiserver shows are
        ours again (times restamped)."""
        for condition in (pod.get("status") or {}).get("conditions") or ():
            kind = condition.get("type")
            reason, message = str(condition.get("reason", "")), str(condition.get("message", ""))
            generation = int(condition.get("observedGeneration", 0) or 0)
            entry = self._conditions.setdefault(_uid(pod), _Conditions())
            if kind == resize.POD_RESIZE_PENDING:
                entry.pending = _condition(kind, None, reason, message, generation=generation, now=self.wall())
            elif kind == resize.POD_RESIZE_IN_PROGRESS:
                entry.in_progress = _condition(kind, None, reason, message, generation=generation, now=self.wall())

    # --- deciding -----------------------------------------------------------------------------------------------

    def handle_resize(self, pod: Pod, active_pods: Sequence[Pod], admit: resize.AdmitFunc) -> bool:
        """Upstream handlePodResourcesResize: decide the resize `pod`'s spec asks for; whether it was allocated."""
        uid = _uid(pod)
        _, updated = self.update_pod_from_allocation(pod)
        if not updated:
            self.clear_pending(uid)
            return False
        others = [self.allocated_pod(p) for p in active_pods if _uid(p) != uid]
        decision = resize.decide_resize(
            pod,
            self.allocated.get_pod(uid) or {},
            other_pods=others,
            allocatable=self.allocatable,
            admit=admit,
            cpu_manager_policy=self.cpu_manager_policy,
            memory_manager_policy=self.memory_manager_policy,
        )
        generation = pod_generation(pod)
        if not decision.allocate:
            log.info(
                "pod resize pending pod=%s uid=%s reason=%s message=%s",
                _ref(pod),
                uid,
                decision.reason,
                decision.message,
            )
            self.set_pending(uid, decision.reason, decision.message, generation)
            return False
        self.set_allocated(pod)
        self.clear_pending(uid)
        # A new allocation starts a new PodResizeInProgress, with this generation.
        self.clear_in_progress(uid)
        self.set_in_progress(uid, "", "", generation)
        log.info("pod resize allocated pod=%s uid=%s generation=%d", _ref(pod), uid, generation)
        return True

    def push_pending_resize(self, uid: str) -> None:
        if uid not in self._pending:
            self._pending.append(uid)

    def has_pending_resizes(self) -> bool:
        return bool(self._pending)

    def retry_due(self) -> bool:
        return self.monotonic() >= self._next_retry

    def retry_pending_resizes(
        self,
        trigger: str,
        *,
        pod_by_uid: Callable[[str], Pod | None],
        active_pods: Callable[[], Sequence[Pod]],
        admit: resize.AdmitFunc,
    ) -> list[str]:
        """Upstream retryPendingResizes: decide each pending resize again, decreases and then higher priority
        first; the UIDs whose pods must sync now (allocated, or their resize conditions changed)."""
        self._next_retry = self.monotonic() + RETRY_SECONDS
        pods = [p for uid in self._pending if (p := pod_by_uid(uid)) is not None]
        pods.sort(key=self._retry_order)
        still: list[str] = []
        to_sync: list[str] = []
        for pod in pods:
            uid = _uid(pod)
            before = self._condition_view(uid)
            allocated = self.handle_resize(pod, active_pods(), admit)
            if self.pending_reason(uid) == resize.DEFERRED:
                still.append(uid)
            if allocated or self._condition_view(uid) != before:
                to_sync.append(uid)
        self._pending = still
        if to_sync:
            log.info("pending resizes retried trigger=%s synced=%d still_pending=%d", trigger, len(to_sync), len(still))
        return to_sync

    def _retry_order(self, pod: Pod) -> tuple[int, int, int, str]:
        allocated_pod, _ = self.update_pod_from_allocation(pod)
        increasing = resize.requests_increase(pod, allocated_pod)
        priority = int((pod.get("spec") or {}).get("priority") or 0)
        guaranteed = compute_pod_qos(pod) is QOSClass.GUARANTEED
        entry = self._conditions.get(_uid(pod))
        since = str(entry.pending.get("lastTransitionTime", "")) if entry and entry.pending else "~"
        return (1 if increasing else 0, -priority, 0 if guaranteed else 1, since)

    def _condition_view(self, uid: str) -> list[tuple[str, str, str]]:
        return [
            (str(c["type"]), str(c.get("reason", "")), str(c.get("message", ""))) for c in self.resize_conditions(uid)
        ]

    # --- progress -----------------------------------------------------------------------------------------------

    def check_resize_in_progress(self, allocated_pod: Pod, running: Callable[[str], bool]) -> None:
        """Upstream CheckPodResizeInProgress, at the start of each pod sync."""
        uid = _uid(allocated_pod)
        if resize.resize_in_progress(allocated_pod, running, lambda name: self.get_actuated(uid, name)):
            self.set_in_progress(uid, "", "", pod_generation(allocated_pod))
        elif self.clear_in_progress(uid):
            message = resize.completion_message(allocated_pod)
            log.info("pod resize completed pod=%s uid=%s", _ref(allocated_pod), uid)
            self.record_event(allocated_pod, "Normal", resize.RESIZE_COMPLETED, message)
