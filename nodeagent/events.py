"""The event recorder: core/v1 Events about pods and the node, as the kubelet's recorder writes them.

`record` never blocks its caller: events go to a bounded queue, and when it is full the event is dropped and
counted. A background task sends them, one at a time, after client-go's correlator (eventcorrelation.py: similar
events aggregated, repeats folded into one Event whose `count` and `lastTimestamp` rise, and at most 25 events per
object then one every 5 minutes), so a crash loop does not flood the apiserver.

As client-go's recordToSink: an event the apiserver could not be reached for is tried again, 12 tries in all, 10 s
apart (the first wait a random part of that, so that nodes do not all come back together), and the events behind
it wait; an event the apiserver refused (a Status) is not tried again. An Event patched after it expired (1 h) is
created again under its name.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from nodeagent.eventcorrelation import Correlated, EventCorrelator
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import AlreadyExists, ApiError, ApiUnavailable, NotFound

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]
COMPONENT = "kubelet"  # upstream's source component, which kubectl and controllers filter on
MAX_TRIES = 12  # client-go's maxTriesPerEvent
RETRY_SLEEP = 10.0  # seconds, client-go's defaultSleepDuration


@dataclass(frozen=True)
class ObjectRef:
    kind: str
    namespace: str
    name: str
    uid: str
    api_version: str = "v1"
    field_path: str = ""

    @classmethod
    def for_pod(cls, pod: dict[str, Any], field_path: str = "") -> ObjectRef:
        meta = pod["metadata"]
        return cls("Pod", meta.get("namespace", "default"), meta["name"], meta.get("uid", ""), "v1", field_path)

    @classmethod
    def for_node(cls, node_name: str) -> ObjectRef:
        # As the kubelet: node events live in "default", with the node name as UID.
        return cls("Node", "", node_name, node_name)


@dataclass(frozen=True)
class _Pending:
    ref: ObjectRef
    type: EventType
    reason: str
    message: str
    at: datetime.datetime
    annotations: Mapping[str, str] = field(default_factory=dict)


def _timestamp(at: datetime.datetime) -> str:
    return at.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    def __init__(
        self,
        client: KubeClient,
        node_name: str,
        *,
        queue_size: int = 1000,
        now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
        correlator: EventCorrelator | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        retry_sleep: float = RETRY_SLEEP,
    ) -> None:
        self._client = client
        self._node = node_name
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=queue_size)
        self._now = now
        self._correlator = correlator or EventCorrelator()
        self._sleep = sleep
        self._retry_sleep = retry_sleep
        self.dropped = 0  # the queue was full
        self.filtered = 0  # the spam filter's
        self.sent = 0
        self.failed = 0  # refused by the apiserver, or out of tries

    def record(
        self, ref: ObjectRef, type_: EventType, reason: str, message: str, annotations: Mapping[str, str] | None = None
    ) -> None:
        """Queue an event; `annotations` go on the Event object (upstream's AnnotatedEventf, used for evictions)."""
        try:
            self._queue.put_nowait(_Pending(ref, type_, reason, message, self._now(), dict(annotations or {})))
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning(
                "event dropped reason=%s object=%s/%s dropped_total=%d", reason, ref.namespace, ref.name, self.dropped
            )

    async def run(self) -> None:
        while True:
            await self._deliver(await self._queue.get(), tries=MAX_TRIES)

    async def flush(self) -> None:
        """For tests and shutdown: send everything queued now, each event tried once."""
        while not self._queue.empty():
            await self._deliver(self._queue.get_nowait(), tries=1)

    async def _deliver(self, pending: _Pending, *, tries: int) -> None:
        event = self._correlator.correlate(pending.ref, pending.type, pending.reason, pending.message, pending.at)
        if event.skip:
            self.filtered += 1
            return
        for attempt in range(1, tries + 1):
            try:
                await self._send(event, pending.annotations)
            except AlreadyExists:
                self.sent += 1  # as client-go: written already (a retry of a create that did reach the apiserver)
                return
            except ApiError as exc:
                self.failed += 1
                log.warning("event refused reason=%s object=%s error=%s", event.reason, _object(event.ref), exc)
                return
            except ApiUnavailable as exc:
                if attempt == tries:
                    self.failed += 1
                    log.warning(
                        "event not sent, out of tries reason=%s object=%s tries=%d error=%s",
                        event.reason,
                        _object(event.ref),
                        attempt,
                        exc,
                    )
                    return
                log.info(
                    "event not sent, trying again reason=%s object=%s try=%d error=%s",
                    event.reason,
                    _object(event.ref),
                    attempt,
                    exc,
                )
                await self._sleep(self._retry_sleep * (random.random() if attempt == 1 else 1.0))
                continue
            self.sent += 1
            return

    async def _send(self, event: Correlated, annotations: Mapping[str, str]) -> None:
        ref = event.ref
        namespace = ref.namespace or "default"
        if event.count > 1:
            try:
                await self._client.patch(
                    paths.event(namespace, event.name),
                    {"count": event.count, "lastTimestamp": _timestamp(event.last), "message": event.message},
                    patch_type="merge",
                )
                return
            except NotFound:
                pass  # the Event expired (1 h TTL): created again under its name, with its count
        involved = {"kind": ref.kind, "name": ref.name, "uid": ref.uid, "apiVersion": ref.api_version}
        if ref.namespace:
            involved["namespace"] = ref.namespace
        if ref.field_path:
            involved["fieldPath"] = ref.field_path
        metadata: dict[str, Any] = {"name": event.name, "namespace": namespace}
        if annotations:
            metadata["annotations"] = dict(annotations)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": metadata,
            "involvedObject": involved,
            "reason": event.reason,
            "message": event.message,
            "type": event.type,
            "source": {"component": COMPONENT, "host": self._node},
            "firstTimestamp": _timestamp(event.first),
            "lastTimestamp": _timestamp(event.last),
            "count": event.count,
            "reportingComponent": COMPONENT,
            "reportingInstance": self._node,
        }
        await self._client.create(paths.events(namespace), body)


def _object(ref: ObjectRef) -> str:
    return f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
