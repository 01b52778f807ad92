"""GetContainerEvents as containerd 1.7 serves it: one subscriber at a time; each lifecycle change sends an event
with the sandbox's status and all its containers' statuses; a container's deletion event no longer lists it; a
sandbox's deletion event has no sandbox status. Events nobody listens to are gone, as on containerd."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable

from cri.v1 import api_pb2

# A full queue drops the event (the PLEG's relist repairs it); producers never block.
QUEUE_SIZE = 1000


class EventStream:
    def __init__(self, now_ns: Callable[[], int]) -> None:
        self._now_ns = now_ns
        self._queue: asyncio.Queue[api_pb2.ContainerEventResponse] | None = None
        self.dropped = 0

    def emit(
        self,
        object_id: str,
        kind: int,
        sandbox: api_pb2.PodSandboxStatus | None,
        containers: Iterable[api_pb2.ContainerStatus],
    ) -> None:
        if self._queue is None:
            return
        event = api_pb2.ContainerEventResponse(
            container_id=object_id,
            container_event_type=kind,  # type: ignore[arg-type]
            created_at=self._now_ns(),
        )
        if sandbox is not None:
            event.pod_sandbox_status.CopyFrom(sandbox)
            event.containers_statuses.extend(containers)
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1

    async def subscribe(self) -> AsyncIterator[api_pb2.ContainerEventResponse]:
        # A new subscriber replaces the previous one (containerd 1.7 serves one).
        queue: asyncio.Queue[api_pb2.ContainerEventResponse] = asyncio.Queue(QUEUE_SIZE)
        self._queue = queue
        try:
            while True:
                yield await queue.get()
        finally:
            if self._queue is queue:
                self._queue = None
