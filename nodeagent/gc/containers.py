"""The container garbage collector (upstream pkg/kubelet/kuberuntime/kuberuntime_gc.go containerGC), over CRI.

The decisions are `eviction.containergc`'s (upstream's policy: MinAge 0, MaxPerPodContainer 1, MaxContainers -1);
this manager lists the runtime's containers and sandboxes that carry the kubelet's labels and removes what they say:

- `run()`: every ContainerGCPeriod (1 min; the clock is injected, the period a parameter so tests can shorten it) a
  `garbage_collect` pass: each container keeps its most recent dead instance, older ones go, and so do the dead
  containers and sandboxes of pods that are gone. A failed pass records upstream's `ContainerGCFailed` event.
- `delete_all_unused_containers()`: the eviction manager's node-level reclaim (upstream's DeleteAllUnusedContainers:
  a pass that also removes what pods that have stopped running left, deleted or not).

A container is removed as upstream's removeContainer does: stopped first when its state is unknown, its log file
removed, then RemoveContainer. A sandbox is stopped (its network torn down) before RemovePodSandbox. A removal that
fails is logged and left to the next pass; only a runtime that cannot be listed fails the pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
from collections.abc import Callable
from typing import Protocol

from cri.errors import CRIError, NotFoundError
from cri.v1 import api_pb2
from eviction import containergc
from eviction.containergc import ContainerGCPolicy, ContainerRecord, PodStates, SandboxRecord
from nodeagent.clock import Clock
from nodeagent.gc.errors import ContainerGCError

log = logging.getLogger(__name__)

POD_UID_LABEL = "io.kubernetes.pod.uid"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"


class ContainerRuntime(Protocol):
    async def list_containers(
        self, filter: api_pb2.ContainerFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.Container]: ...

    async def list_pod_sandbox(
        self, filter: api_pb2.PodSandboxFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.PodSandbox]: ...

    async def container_status(
        self, container_id: str, verbose: bool = False, *, timeout: float | None = None
    ) -> api_pb2.ContainerStatusResponse: ...

    async def stop_container(self, container_id: str, timeout: int) -> None: ...

    async def remove_container(self, container_id: str, *, timeout: float | None = None) -> None: ...

    async def stop_pod_sandbox(self, pod_sandbox_id: str, *, timeout: float | None = None) -> None: ...

    async def remove_pod_sandbox(self, pod_sandbox_id: str, *, timeout: float | None = None) -> None: ...


def _no_event(type_: str, reason: str, message: str) -> None:
    del type_, reason, message


def _never(container_id: str) -> bool:
    del container_id
    return False


def _time(nanoseconds: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(nanoseconds / 1e9, tz=datetime.UTC)


def container_records(containers: list[api_pb2.Container]) -> list[ContainerRecord]:
    """The kubelet's containers (those with its labels) as the decisions see them."""
    return [
        ContainerRecord(
            id=c.id,
            pod_uid=c.labels[POD_UID_LABEL],
            name=c.labels.get(CONTAINER_NAME_LABEL) or c.metadata.name,
            created=_time(c.created_at),
            running=c.state == api_pb2.CONTAINER_RUNNING,
            unknown=c.state == api_pb2.CONTAINER_UNKNOWN,
            attempt=c.metadata.attempt,
            sandbox_id=c.pod_sandbox_id,
        )
        for c in containers
        if c.labels.get(POD_UID_LABEL)
    ]


def sandbox_records(sandboxes: list[api_pb2.PodSandbox]) -> list[SandboxRecord]:
    return [
        SandboxRecord(
            id=s.id,
            pod_uid=s.labels[POD_UID_LABEL],
            created=_time(s.created_at),
            ready=s.state == api_pb2.SANDBOX_READY,
            attempt=s.metadata.attempt,
        )
        for s in sandboxes
        if s.labels.get(POD_UID_LABEL)
    ]


class ContainerGCManager:
    def __init__(
        self,
        runtime: ContainerRuntime,
        *,
        pod_state: PodStates,
        sources_ready: Callable[[], bool],
        clock: Clock,
        policy: ContainerGCPolicy | None = None,
        record_node_event: Callable[[str, str, str], None] = _no_event,
        unremovable: Callable[[str], bool] = _never,
    ) -> None:
        self._runtime = runtime
        self._pod_state = pod_state
        self._sources_ready = sources_ready
        self._clock = clock
        self.policy = policy if policy is not None else ContainerGCPolicy()
        self._event = record_node_event
        # Containers the runtime manager already knows containerd will not let go of: not tried again.
        self._unremovable = unremovable

    async def _containers(self) -> list[ContainerRecord]:
        try:
            return container_records(await self._runtime.list_containers())
        except CRIError as exc:
            raise ContainerGCError(f"failed to list containers: {exc}") from exc

    async def garbage_collect(self, *, evict_non_deleted: bool = False) -> None:
        """One pass (upstream's GarbageCollect): dead containers, then sandboxes left with none. Raises
        ContainerGCError when the runtime cannot be listed."""
        containers = await self._containers()
        for record in containergc.containers_to_remove(
            containers,
            self._pod_state,
            policy=self.policy,
            now=self._clock.wall(),
            all_sources_ready=self._sources_ready(),
            evict_non_deleted=evict_non_deleted,
        ):
            await self._remove_container(record)
        # Listed again: a sandbox is decided on the containers that are really left.
        containers = await self._containers()
        try:
            sandboxes = sandbox_records(await self._runtime.list_pod_sandbox())
        except CRIError as exc:
            raise ContainerGCError(f"failed to list pod sandboxes: {exc}") from exc
        for sandbox in containergc.sandboxes_to_remove(
            sandboxes, containers, self._pod_state, evict_non_deleted=evict_non_deleted
        ):
            await self._remove_sandbox(sandbox)

    async def delete_all_unused_containers(self) -> None:
        """The eviction manager's node-level reclaim (upstream's DeleteAllUnusedContainers)."""
        log.info("container gc attempting to delete unused containers")
        await self.garbage_collect(evict_non_deleted=True)

    async def _remove_container(self, record: ContainerRecord) -> None:
        if self._unremovable(record.id):
            return
        try:
            if record.unknown:
                # As upstream: a container in an unknown state may still run; it is stopped before removal.
                await self._runtime.stop_container(record.id, 0)
            log_path = ""
            with contextlib.suppress(NotFoundError):
                log_path = (await self._runtime.container_status(record.id)).status.log_path
            if log_path:
                # As upstream's removeContainerLog: the log goes with the container (the runtime keeps it).
                with contextlib.suppress(FileNotFoundError):
                    await asyncio.to_thread(os.remove, log_path)
            with contextlib.suppress(NotFoundError):  # idempotent, as CRI demands
                await self._runtime.remove_container(record.id)
        except (CRIError, OSError) as exc:
            log.warning(
                "container gc failed to remove container id=%s pod_uid=%s container=%s error=%s",
                record.id[:12],
                record.pod_uid,
                record.name,
                exc,
            )
            return
        log.info(
            "container gc removed container id=%s pod_uid=%s container=%s attempt=%d",
            record.id[:12],
            record.pod_uid,
            record.name,
            record.attempt,
        )

    async def _remove_sandbox(self, sandbox: SandboxRecord) -> None:
        try:
            # As upstream: stopped first in case the kubelet never did (its network goes with it).
            with contextlib.suppress(NotFoundError):
                await self._runtime.stop_pod_sandbox(sandbox.id)
            with contextlib.suppress(NotFoundError):
                await self._runtime.remove_pod_sandbox(sandbox.id)
        except CRIError as exc:
            log.warning(
                "container gc failed to remove sandbox id=%s pod_uid=%s error=%s", sandbox.id[:12], sandbox.pod_uid, exc
            )
            return
        log.info("container gc removed sandbox id=%s pod_uid=%s", sandbox.id[:12], sandbox.pod_uid)

    async def run(self, period: float = containergc.CONTAINER_GC_PERIOD.total_seconds()) -> None:
        """The periodic pass; a failed one records ContainerGCFailed on the Node, as upstream's kubelet."""
        failed_before = False
        while True:
            try:
                await self.garbage_collect()
            except ContainerGCError as exc:
                log.error("container garbage collection failed error=%s", exc)
                self._event("Warning", containergc.CONTAINER_GC_FAILED, str(exc))
                failed_before = True
            else:
                if failed_before:
                    log.info("container garbage collection succeeded")
                failed_before = False
            await self._clock.sleep(period)
