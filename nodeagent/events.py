"""The event recorder: core/v1 Events about pods and the node, as the kubelet's recorder writes them.

`record` never blocks its caller: events go to a bounded queue, and when it is full the event is dropped and
counted. A background task sends them. Repeats of the same (object, type, reason, message) are folded into one
Event whose `count` and `lastTimestamp` rise, as client-go's correlator does, so a crash loop does not flood the
apiserver.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import ApiError, ApiUnavailable, NotFound

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]
COMPONENT = "kubelet"  # upstream's source component, which kubectl and controllers filter on
_CACHE_SIZE = 4096


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
    ) -> None:
        self._client = client
        self._node = node_name
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=queue_size)
        self._now = now
        # (ref, type, reason, message) -> (namespace, event name, count)
        self._seen: OrderedDict[tuple[ObjectRef, str, str, str], tuple[str, str, int]] = OrderedDict()
        self.dropped = 0
        self.sent = 0

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
            pending = await self._queue.get()
            try:
                await self._send(pending)
                self.sent += 1
            except (ApiError, ApiUnavailable) as exc:
                log.warning(
                    "event not sent reason=%s object=%s/%s error=%s",
                    pending.reason,
                    pending.ref.namespace,
                    pending.ref.name,
                    exc,
                )

    async def flush(self) -> None:
        """For tests and shutdown: send everything queued now."""
        while not self._queue.empty():
            pending = self._queue.get_nowait()
            await self._send(pending)
            self.sent += 1

    async def _send(self, pending: _Pending) -> None:
        key = (pending.ref, pending.type, pending.reason, pending.message)
        namespace = pending.ref.namespace or "default"
        seen = self._seen.get(key)
        if seen is not None:
            ns, name, count = seen
            try:
                await self._client.patch(
                    paths.event(ns, name),
                    {"count": count + 1, "lastTimestamp": _timestamp(pending.at)},
                    patch_type="merge",
                )
                self._remember(key, (ns, name, count + 1))
                return
            except NotFound:
                pass  # the Event expired (1 h TTL); write a new one
        name = f"{pending.ref.name}.{int(pending.at.timestamp() * 1e9):x}"
        ref = pending.ref
        involved = {"kind": ref.kind, "name": ref.name, "uid": ref.uid, "apiVersion": ref.api_version}
        if ref.namespace:
            involved["namespace"] = ref.namespace
        if ref.field_path:
            involved["fieldPath"] = ref.field_path
        metadata: dict[str, Any] = {"name": name, "namespace": namespace}
        if pending.annotations:
            metadata["annotations"] = dict(pending.annotations)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": metadata,
            "involvedObject": involved,
            "reason": pending.reason,
            "message": pending.message,
            "type": pending.type,
            "source": {"component": COMPONENT, "host": self._node},
            "firstTimestamp": _timestamp(pending.at),
            "lastTimestamp": _timestamp(pending.at),
            "count": 1,
            "reportingComponent": COMPONENT,
            "reportingInstance": self._node,
        }
        await self._client.create(paths.events(namespace), body)
        self._remember(key, (namespace, name, 1))

    def _remember(self, key: tuple[ObjectRef, str, str, str], value: tuple[str, str, int]) -> None:
        self._seen[key] = value
        self._seen.move_to_end(key)
        while len(self._seen) > _CACHE_SIZE:
            self._seen.popitem(last=False)
