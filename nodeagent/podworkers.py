"""Pod workers: one asyncio task per pod UID, the latest update wins, and a pod is never synced twice at once.

As upstream's pod_workers.go, each pod moves through an explicit state machine:

    SYNCING ──(deleted, killed, or its phase is final)──► TERMINATING ──► TERMINATED

- SYNCING: `sync_pod` makes the runtime match the spec; it returns True when the pod reached a final phase
  (Succeeded/Failed), which starts termination.
- TERMINATING: `sync_terminating_pod` stops every container and the sandbox with the grace period.
- TERMINATED: `sync_terminated_pod` cleans up what is left (volumes, cgroups, the API object).

`update_pod` never blocks: it stores the update as the worker's pending work (replacing any older pending one,
since the newest spec is the only one that matters) and wakes the worker. Once a pod is terminating, later updates
cannot bring it back to syncing; a new pod with the same name gets a new UID and a new worker.

A pod first seen with a final phase (after a restart, say) never syncs: its worker starts terminating it, and when
the runtime too has nothing of it running (no running container, no ready sandbox) it goes straight to the
terminated sync, as upstream's UpdatePod does for a pod "terminal in the config source and in the runtime cache":
the agent died after it stopped the pod and before the terminated sync ended (the API delete of a deleted pod).

A sync that fails is tried again, as upstream's pod workers do, in two ways. The syncer is told (`on_error`) and
schedules the pod's next sync after `backoff_after_error` (upstream's completeWork: 10 s plus up to half of it), which
the sync tick brings to a pod its sources still have. A pod no source has any more gets no tick and no update: each
housekeeping pass (`sync_known_pods`, upstream's SyncKnownPods) runs its worker again with its last pod until the
worker has finished, and only then forgets it. Without that a termination that failed after its pod left the
apiserver was never tried again, and housekeeping, which spares the pods a worker knows, left its sandbox for good.

Before each of those calls the worker reads the pod's runtime status from the PLEG's cache, *newer than* the end of
its own last sync (upstream: podCache.GetNewerThan(uid, lastSyncTime)), and waits until there is one: a worker never
decides from a status that predates what it did itself.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

from cri.v1 import api_pb2
from nodeagent.kube.errors import KubeError
from nodeagent.podconfig.storage import pod_ref as _pod_ref
from pleg.status import PodStatus

log = logging.getLogger(__name__)

Pod = dict[str, Any]


class WorkState(enum.Enum):
    SYNCING = "syncing"
    TERMINATING = "terminating"
    TERMINATED = "terminated"


class UpdateType(enum.Enum):
    CREATE = "create"
    UPDATE = "update"
    SYNC = "sync"
    KILL = "kill"


@dataclass(frozen=True)
class UpdatePodOptions:
    update_type: UpdateType
    pod: Pod
    # For KILL: the grace period to use instead of the pod's own (eviction, admission rejection...).
    grace_period_override: int | None = None
    # For KILL: the status to report while the pod goes down (e.g. Failed/Evicted), applied by the syncer.
    kill_reason: str | None = None


class PodSyncer(Protocol):
    """What a worker calls; the kubelet's SyncPod / SyncTerminatingPod / SyncTerminatedPod, each with the pod's
    runtime status from the cache."""

    async def sync_pod(self, update_type: UpdateType, pod: Pod, status: PodStatus) -> bool: ...

    async def sync_terminating_pod(
        self, pod: Pod, status: PodStatus, grace_period: int, kill_reason: str | None
    ) -> None: ...

    async def sync_terminated_pod(self, pod: Pod, status: PodStatus) -> None: ...


class PodStatusSource(Protocol):
    """The narrow part of the PLEG's pod status cache a worker reads (pleg.cache.PodStatusCache)."""

    async def get_newer_than(self, uid: str, min_time: float) -> PodStatus: ...

    def has_newer_than(self, uid: str, min_time: float) -> bool: ...


def pod_uid(pod: Pod) -> str:
    return str(pod["metadata"]["uid"])


def grace_period(pod: Pod, override: int | None) -> int:
    """The grace to kill with: an override, else the deletion's, else the spec's, else upstream's default 30."""
    if override is not None:
        return max(override, 0)
    meta_grace = pod.get("metadata", {}).get("deletionGracePeriodSeconds")
    if meta_grace is not None:
        return max(int(meta_grace), 0)
    spec_grace = pod.get("spec", {}).get("terminationGracePeriodSeconds")
    return 30 if spec_grace is None else max(int(spec_grace), 0)


TERMINAL_PHASES = ("Succeeded", "Failed")

# Upstream's back-off after a failed sync (kubelet.go backOffPeriod, pod_workers.go workerBackOffPeriodJitterFactor).
BACKOFF_PERIOD = 10.0
BACKOFF_JITTER_FACTOR = 0.5


def backoff_after_error(rand: Callable[[], float] = random.random) -> float:
    """When a failed sync is tried again: upstream's wait.Jitter(backOffPeriod, 0.5), 10 s to 15 s."""
    return BACKOFF_PERIOD * (1.0 + BACKOFF_JITTER_FACTOR * rand())


def runtime_terminal(status: PodStatus) -> bool:
    """Nothing of the pod runs in the runtime: no running container, no ready sandbox (upstream's
    isPodStatusCacheTerminal). A pod the runtime does not know at all is terminal too."""
    return not any(c.status.state == api_pb2.CONTAINER_RUNNING for c in status.containers) and not any(
        s.state == api_pb2.SANDBOX_READY for s in status.sandboxes
    )


def first_state(pod: Pod) -> WorkState:
    """Where the worker of a pod it has never seen starts: a pod whose phase is final is not set up again, it is
    terminated (upstream's UpdatePod: a terminal phase requests termination)."""
    phase = (pod.get("status") or {}).get("phase")
    return WorkState.TERMINATING if phase in TERMINAL_PHASES else WorkState.SYNCING


def skip_terminating(state: WorkState, runtime: PodStatus) -> WorkState:
    """For a worker that starts at `state` (`first_state`), the state its first sync runs in once the runtime's
    status is known: a pod terminal in the API whose runtime has nothing running was stopped before (by an agent that
    died before it finished): only the terminated sync is left."""
    if state is WorkState.TERMINATING and runtime_terminal(runtime):
        return WorkState.TERMINATED
    return state


def _deleting(pod: Pod) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _wants_termination(options: UpdatePodOptions) -> bool:
    if options.update_type is UpdateType.KILL:
        return True
    return bool(options.pod.get("metadata", {}).get("deletionTimestamp"))


@dataclass
class _Worker:
    uid: str
    pod: Pod
    state: WorkState = WorkState.SYNCING
    pending: UpdatePodOptions | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    grace_override: int | None = None
    kill_reason: str | None = None
    syncs: int = 0
    finished: bool = False  # sync_terminated_pod succeeded: nothing is left to do for this UID
    busy: bool = False
    last_sync_time: float = 0.0  # wall seconds at the end of the last sync: the next one needs a newer status
    # First seen with a final phase: the first sync asks the runtime whether the kill can be skipped.
    first_seen_terminal: bool = False


class PodWorkers:
    """The set of per-pod workers. Decisions live in the syncer; this class only orders and serialises work."""

    def __init__(
        self,
        syncer: PodSyncer,
        *,
        pod_cache: PodStatusSource,
        now: Callable[[], float] = time.time,
        on_error: Callable[[str, BaseException], None] | None = None,
        request_relist: Callable[[str], None] | None = None,
    ) -> None:
        self._syncer = syncer
        self._cache = pod_cache
        self._request_relist = request_relist
        self._now = now
        self._workers: dict[str, _Worker] = {}
        self._on_error = on_error
        self._changed = asyncio.Condition()

    def update_pod(self, options: UpdatePodOptions) -> None:
        uid = pod_uid(options.pod)
        worker = self._workers.get(uid)
        if worker is None:
            state = first_state(options.pod)
            worker = _Worker(uid=uid, pod=options.pod, state=state)
            worker.first_seen_terminal = state is WorkState.TERMINATING
            self._workers[uid] = worker
            worker.task = asyncio.create_task(self._run(worker), name=f"pod-worker-{uid}")
        if worker.finished:
            return
        if _wants_termination(options) and worker.state is WorkState.SYNCING:
            worker.state = WorkState.TERMINATING
        if options.update_type is UpdateType.KILL:
            # The shortest grace asked for wins, as upstream does once a kill is under way.
            if options.grace_period_override is not None:
                old = worker.grace_override
                worker.grace_override = (
                    options.grace_period_override if old is None else min(old, options.grace_period_override)
                )
            worker.kill_reason = worker.kill_reason or options.kill_reason
        worker.pending = options
        worker.wake.set()

    def state(self, uid: str) -> WorkState | None:
        worker = self._workers.get(uid)
        return None if worker is None else worker.state

    def could_have_running_containers(self, uid: str) -> bool:
        """Whether the pod's containers may still run: its worker has not finished terminating it (upstream
        podWorkers.CouldHaveRunningContainers). A pod no worker knows runs nothing."""
        worker = self._workers.get(uid)
        return worker is not None and worker.state in (WorkState.SYNCING, WorkState.TERMINATING)

    def known_uids(self) -> list[str]:
        return list(self._workers)

    def pod(self, uid: str) -> Pod | None:
        """The pod as its worker last saw it (also after its source removed it, while it terminates)."""
        worker = self._workers.get(uid)
        return None if worker is None else worker.pod

    def forget(self, uid: str) -> None:
        """Drop a terminated worker's record (a deleted pod's worker that finished starts again to clean up)."""
        worker = self._workers.get(uid)
        if worker is not None and worker.finished:
            del self._workers[uid]

    def sync_known_pods(self, desired: Collection[str]) -> None:
        """Housekeeping (upstream's SyncKnownPods and removeTerminatedWorker): the worker of a pod no source has any
        more (not in `desired`) is forgotten once it has finished; until then it is run again with its last pod,
        since nothing else will wake it: a running one starts terminating, one whose termination failed retries."""
        for uid, worker in list(self._workers.items()):
            if uid in desired:
                continue
            if worker.finished:
                del self._workers[uid]
                continue
            if worker.state is WorkState.SYNCING:
                worker.state = WorkState.TERMINATING
                log.info("pod orphaned while running, terminating pod=%s uid=%s", _pod_ref(worker.pod), uid)
            if worker.pending is None:
                # As upstream's requeueLastPodUpdate: an update already waiting will do; a running sync is not
                # interrupted, the worker takes this one when it ends.
                log.debug(
                    "pod orphaned, worker run again pod=%s uid=%s state=%s",
                    _pod_ref(worker.pod),
                    uid,
                    worker.state.value,
                )
                worker.pending = UpdatePodOptions(UpdateType.SYNC, worker.pod)
                worker.wake.set()

    async def stop(self) -> None:
        tasks = [w.task for w in self._workers.values() if w.task is not None and not w.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def wait_idle(self) -> None:
        """For tests and shutdown: wait until no worker has pending work."""
        async with self._changed:
            await self._changed.wait_for(lambda: all(w.pending is None and not w.busy for w in self._workers.values()))

    async def _run(self, worker: _Worker) -> None:
        while True:
            await worker.wake.wait()
            worker.wake.clear()
            options, worker.pending = worker.pending, None
            if options is None:
                continue
            worker.pod = options.pod
            worker.busy = True
            try:
                await self._step(worker, options)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # One pod's failure never stops the others. The syncer schedules the retry after the back-off
                # (on_error); a pod no source has any more is retried by housekeeping (sync_known_pods).
                # The apiserver gone or answering an error is an error of the sync, not of the code: one line, as
                # upstream's "Error syncing pod, skipping"; anything else keeps its traceback.
                log.error(
                    "pod worker sync failed pod=%s uid=%s state=%s error=%s",
                    _pod_ref(worker.pod),
                    worker.uid,
                    worker.state.value,
                    exc,
                    exc_info=not isinstance(exc, KubeError),
                )
                if self._on_error is not None:
                    self._on_error(worker.uid, exc)
            finally:
                worker.busy = False
            async with self._changed:
                self._changed.notify_all()
            if worker.finished and await self._late_deletion(worker):
                return

    async def _late_deletion(self, worker: _Worker) -> bool:
        """A delete (deletionTimestamp) that reached the worker while it was terminating the pod, after the
        terminated sync had read the pod without it: that sync runs again with the deleted pod, so its API object is
        removed (upstream's worker always finishes with the latest pod). Without this a pod whose container ended on
        its own and that was deleted meanwhile stayed Terminating for ever. False when that sync failed: the worker
        is not finished and waits, like any failed sync, for the retry (on_error's back-off, or housekeeping)."""
        late, worker.pending = worker.pending, None
        if late is None or not _deleting(late.pod) or _deleting(worker.pod):
            return True
        worker.pod = late.pod
        try:
            await self._syncer.sync_terminated_pod(worker.pod, await self._fresh_status(worker))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("pod worker sync failed pod=%s uid=%s state=terminated", _pod_ref(worker.pod), worker.uid)
            worker.finished = False
            if self._on_error is not None:
                self._on_error(worker.uid, exc)
            return False
        return True

    async def _fresh_status(self, worker: _Worker) -> PodStatus:
        # Upstream waits for the next relist (1 s) or, evented, the cache's periodic tick. A worker with work to do
        # asks the PLEG to relist its pod instead (one pod's inspection, a few milliseconds): a delete that comes
        # right after a sync then kills at once instead of a tick later (measured: 3.3 s from the delete to the
        # kill with the evented PLEG's 2 s tick, 0.1 s with this).
        if self._request_relist is not None and not self._cache.has_newer_than(worker.uid, worker.last_sync_time):
            self._request_relist(worker.uid)
        return await self._cache.get_newer_than(worker.uid, worker.last_sync_time)

    async def _step(self, worker: _Worker, options: UpdatePodOptions) -> None:
        worker.syncs += 1
        try:
            if worker.state is WorkState.SYNCING:
                status = await self._fresh_status(worker)
                finished = await self._syncer.sync_pod(options.update_type, worker.pod, status)
                if finished and worker.state is WorkState.SYNCING:
                    worker.state = WorkState.TERMINATING
                    worker.wake.set()
                    worker.pending = worker.pending or UpdatePodOptions(UpdateType.SYNC, worker.pod)
                return
            if worker.state is WorkState.TERMINATING and worker.first_seen_terminal:
                worker.state = skip_terminating(worker.state, await self._fresh_status(worker))
                worker.first_seen_terminal = False
                if worker.state is WorkState.TERMINATED:
                    log.info(
                        "pod terminal in the apiserver and the runtime, to the terminated sync pod=%s uid=%s phase=%s",
                        _pod_ref(worker.pod),
                        worker.uid,
                        (worker.pod.get("status") or {}).get("phase"),
                    )
            if worker.state is WorkState.TERMINATING:
                grace = grace_period(worker.pod, worker.grace_override)
                status = await self._fresh_status(worker)
                await self._syncer.sync_terminating_pod(worker.pod, status, grace, worker.kill_reason)
                worker.last_sync_time = self._now()
                worker.state = WorkState.TERMINATED
                log.info("pod terminated pod=%s uid=%s", _pod_ref(worker.pod), worker.uid)
            if worker.state is WorkState.TERMINATED:
                await self._syncer.sync_terminated_pod(worker.pod, await self._fresh_status(worker))
                worker.finished = True
        finally:
            worker.last_sync_time = self._now()
