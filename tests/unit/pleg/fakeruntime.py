"""An in-memory runtime for the PLEG's unit tests: the part of `cri.service.RuntimeService` the PLEG uses.

It keeps sandboxes and containers with the kubelet's labels, answers ListPodSandbox / ListContainers (label
selector filters), PodSandboxStatus / ContainerStatus (NotFound for unknown IDs), and serves GetContainerEvents the
way containerd 1.7 does: each lifecycle call sends an event carrying the sandbox's status and all its containers'
statuses; a container's deletion event no longer lists it; a sandbox's deletion event has no sandbox status.
`tests/integration/test_pleg.py::test_fake_runtime_matches_containerd` checks those shapes against containerd.

Faults are injected per method: `fail[method] = error` raises once per call until removed; `hold[id] = Event`
holds a status call for that object until the event is set (or the call's timeout passes: DeadlineExceeded).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import grpc

from cri.errors import CRIError, DeadlineExceededError, NotFoundError, UnimplementedError
from cri.v1 import api_pb2

UID, NAME, NAMESPACE = "io.kubernetes.pod.uid", "io.kubernetes.pod.name", "io.kubernetes.pod.namespace"
CONTAINER_NAME = "io.kubernetes.container.name"


@dataclass
class _Sandbox:
    id: str
    uid: str
    name: str
    namespace: str
    created_at: int
    state: int = api_pb2.SANDBOX_READY
    ip: str = ""
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class _Container:
    id: str
    sandbox_id: str
    name: str
    created_at: int
    labels: dict[str, str]
    state: int = api_pb2.CONTAINER_CREATED
    exit_code: int = 0
    started_at: int = 0
    finished_at: int = 0


class FakeRuntime:
    def __init__(self, now_ns: Callable[[], int]) -> None:
        self._now_ns = now_ns
        self._ids = itertools.count(1)
        self.sandboxes: dict[str, _Sandbox] = {}
        self.containers: dict[str, _Container] = {}
        self.fail: dict[str, CRIError] = {}
        self.hold: dict[str, asyncio.Event] = {}
        self.calls: list[str] = []
        self.timeouts: list[float | None] = []
        self.selectors: list[dict[str, str]] = []  # the label selector of every list call, in order
        # The event stream: one subscriber at a time, as containerd 1.7.
        self.unimplemented = False
        self.open_failures: list[CRIError] = []  # each stream opened pops one and fails with it
        self.subscribers = 0
        self._events: asyncio.Queue[api_pb2.ContainerEventResponse | CRIError] | None = None

    # --- building state (what the kubelet or a user would do through CRI) ---------------------------------------

    def run_sandbox(self, uid: str, name: str = "p", namespace: str = "default", *, ip: str = "198.18.0.5") -> str:
        sandbox_id = f"sb{next(self._ids)}"
        labels = {UID: uid, NAME: name, NAMESPACE: namespace}
        self.sandboxes[sandbox_id] = _Sandbox(sandbox_id, uid, name, namespace, self._now_ns(), ip=ip, labels=labels)
        self._emit(sandbox_id, sandbox_id, api_pb2.CONTAINER_CREATED_EVENT)
        self._emit(sandbox_id, sandbox_id, api_pb2.CONTAINER_STARTED_EVENT)
        return sandbox_id

    def run_foreign_sandbox(self) -> str:
        """A sandbox without the kubelet's labels (someone else's)."""
        sandbox_id = f"sb{next(self._ids)}"
        self.sandboxes[sandbox_id] = _Sandbox(sandbox_id, "", "foreign", "x", self._now_ns(), labels={})
        return sandbox_id

    def create_container(self, sandbox_id: str, name: str) -> str:
        sandbox = self.sandboxes[sandbox_id]
        container_id = f"c{next(self._ids)}"
        labels = {UID: sandbox.uid, NAME: sandbox.name, NAMESPACE: sandbox.namespace, CONTAINER_NAME: name}
        self.containers[container_id] = _Container(container_id, sandbox_id, name, self._now_ns(), labels)
        self._emit(container_id, sandbox_id, api_pb2.CONTAINER_CREATED_EVENT)
        return container_id

    def start_container(self, container_id: str) -> None:
        container = self.containers[container_id]
        container.state, container.started_at = api_pb2.CONTAINER_RUNNING, self._now_ns()
        self._emit(container_id, container.sandbox_id, api_pb2.CONTAINER_STARTED_EVENT)

    def run_container(self, sandbox_id: str, name: str) -> str:
        container_id = self.create_container(sandbox_id, name)
        self.start_container(container_id)
        return container_id

    def exit_container(self, container_id: str, exit_code: int = 0) -> None:
        container = self.containers[container_id]
        container.state, container.exit_code, container.finished_at = (
            api_pb2.CONTAINER_EXITED,
            exit_code,
            self._now_ns(),
        )
        self._emit(container_id, container.sandbox_id, api_pb2.CONTAINER_STOPPED_EVENT)

    def remove_container(self, container_id: str) -> None:
        container = self.containers.pop(container_id)
        self._emit(container_id, container.sandbox_id, api_pb2.CONTAINER_DELETED_EVENT)

    def stop_sandbox(self, sandbox_id: str) -> None:
        for container in self.containers.values():
            if container.sandbox_id == sandbox_id and container.state == api_pb2.CONTAINER_RUNNING:
                self.exit_container(container.id, 137)
        self.sandboxes[sandbox_id].state = api_pb2.SANDBOX_NOTREADY
        self._emit(sandbox_id, sandbox_id, api_pb2.CONTAINER_STOPPED_EVENT)

    def remove_sandbox(self, sandbox_id: str) -> None:
        for container_id in [c.id for c in self.containers.values() if c.sandbox_id == sandbox_id]:
            self.remove_container(container_id)
        del self.sandboxes[sandbox_id]
        self._emit(sandbox_id, sandbox_id, api_pb2.CONTAINER_DELETED_EVENT)

    def break_stream(self, error: CRIError) -> None:
        if self._events is not None:
            self._events.put_nowait(error)

    # --- RuntimeService (the methods the PLEG calls) ----------------------------------------------------------

    async def list_pod_sandbox(
        self, filter: api_pb2.PodSandboxFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.PodSandbox]:
        await self._enter("ListPodSandbox", "", timeout)
        selector = dict(filter.label_selector) if filter is not None else {}
        self.selectors.append(selector)
        return [
            api_pb2.PodSandbox(
                id=s.id,
                state=s.state,  # type: ignore[arg-type]
                created_at=s.created_at,
                labels=s.labels,
                metadata=api_pb2.PodSandboxMetadata(name=s.name, namespace=s.namespace, uid=s.uid),
            )
            for s in self.sandboxes.values()
            if all(s.labels.get(k) == v for k, v in selector.items())
        ]

    async def list_containers(
        self, filter: api_pb2.ContainerFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.Container]:
        await self._enter("ListContainers", "", timeout)
        selector = dict(filter.label_selector) if filter is not None else {}
        self.selectors.append(selector)
        return [
            api_pb2.Container(
                id=c.id,
                pod_sandbox_id=c.sandbox_id,
                state=c.state,  # type: ignore[arg-type]
                created_at=c.created_at,
                labels=c.labels,
                metadata=api_pb2.ContainerMetadata(name=c.name),
            )
            for c in self.containers.values()
            if all(c.labels.get(k) == v for k, v in selector.items())
        ]

    async def pod_sandbox_status(
        self, pod_sandbox_id: str, verbose: bool = False, *, timeout: float | None = None
    ) -> api_pb2.PodSandboxStatusResponse:
        await self._enter("PodSandboxStatus", pod_sandbox_id, timeout)
        if pod_sandbox_id not in self.sandboxes:
            raise NotFoundError("PodSandboxStatus", grpc.StatusCode.NOT_FOUND, f"sandbox {pod_sandbox_id} not found")
        return api_pb2.PodSandboxStatusResponse(status=self._sandbox_status(self.sandboxes[pod_sandbox_id]))

    async def container_status(
        self, container_id: str, verbose: bool = False, *, timeout: float | None = None
    ) -> api_pb2.ContainerStatusResponse:
        await self._enter("ContainerStatus", container_id, timeout)
        if container_id not in self.containers:
            raise NotFoundError("ContainerStatus", grpc.StatusCode.NOT_FOUND, f"container {container_id} not found")
        return api_pb2.ContainerStatusResponse(status=self._container_status(self.containers[container_id]))

    async def get_container_events(
        self, *, timeout: float | None = None
    ) -> AsyncIterator[api_pb2.ContainerEventResponse]:
        self.calls.append("GetContainerEvents")
        if self.unimplemented:
            raise UnimplementedError("GetContainerEvents", grpc.StatusCode.UNIMPLEMENTED, "not implemented")
        if self.open_failures:
            raise self.open_failures.pop(0)
        self._events = asyncio.Queue()
        self.subscribers += 1
        try:
            while True:
                item = await self._events.get()
                if isinstance(item, CRIError):
                    raise item
                yield item
        finally:
            self.subscribers -= 1
            self._events = None

    # --- helpers -------------------------------------------------------------------------------------------

    async def _enter(self, method: str, object_id: str, timeout: float | None) -> None:
        self.calls.append(method)
        self.timeouts.append(timeout)
        if method in self.fail:
            raise self.fail[method]
        held = self.hold.get(object_id)
        if held is not None:
            try:
                await asyncio.wait_for(held.wait(), timeout)
            except TimeoutError as exc:
                raise DeadlineExceededError(method, grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded") from exc

    def _sandbox_status(self, s: _Sandbox) -> api_pb2.PodSandboxStatus:
        status = api_pb2.PodSandboxStatus(
            id=s.id,
            state=s.state,  # type: ignore[arg-type]
            created_at=s.created_at,
            labels=s.labels,
            metadata=api_pb2.PodSandboxMetadata(name=s.name, namespace=s.namespace, uid=s.uid),
        )
        if s.state == api_pb2.SANDBOX_READY and s.ip:
            status.network.ip = s.ip
        return status

    def _container_status(self, c: _Container) -> api_pb2.ContainerStatus:
        return api_pb2.ContainerStatus(
            id=c.id,
            state=c.state,  # type: ignore[arg-type]
            created_at=c.created_at,
            started_at=c.started_at,
            finished_at=c.finished_at,
            exit_code=c.exit_code,
            labels=c.labels,
            metadata=api_pb2.ContainerMetadata(name=c.name),
        )

    def _emit(self, object_id: str, sandbox_id: str, kind: int) -> None:
        if self._events is None:
            return  # as containerd: nobody listens, the event is gone
        sandbox = self.sandboxes.get(sandbox_id)
        event = api_pb2.ContainerEventResponse(
            container_id=object_id,
            container_event_type=kind,  # type: ignore[arg-type]
            created_at=self._now_ns(),
        )
        if sandbox is not None:
            event.pod_sandbox_status.CopyFrom(self._sandbox_status(sandbox))
            event.containers_statuses.extend(
                self._container_status(c) for c in self.containers.values() if c.sandbox_id == sandbox_id
            )
        self._events.put_nowait(event)

    def make_event(
        self, object_id: str, sandbox_id: str, kind: int, *, created_at: int | None = None
    ) -> api_pb2.ContainerEventResponse:
        """An event as the runtime would send it now, without sending it (for `EventedPLEG.process` tests)."""
        queue, self._events = self._events, asyncio.Queue()
        try:
            self._emit(object_id, sandbox_id, kind)
            event = self._events.get_nowait()
            assert isinstance(event, api_pb2.ContainerEventResponse)
        finally:
            self._events = queue
        if created_at is not None:
            event.created_at = created_at
        return event
