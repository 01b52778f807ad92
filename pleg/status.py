"""The pod status the PLEG keeps in its cache: what the runtime says about one pod, in CRI's own messages.

Upstream keeps `kubecontainer.PodStatus` in the pod cache. `pleg` may not import `nodeagent`, so it owns this type
and keeps the answers as CRI gave them (PodSandboxStatus and ContainerStatus messages); the agent converts them into
its own view where it decides (`nodeagent.kuberuntime.actions.from_pod_status`). A status is built two ways:

- by inspecting the runtime, one PodSandboxStatus / ContainerStatus call per object (`pleg.inspect`);
- from a container event, which carries the status of the event's sandbox and of every container in it
  (`from_event`). Other sandboxes of the pod (an older attempt) are kept from the previous status, so one event
  never makes the agent forget a sandbox that still exists.

Treat the messages as read-only: the same status object is handed to every reader of the cache.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from cri.v1 import api_pb2

POD_UID_LABEL = "io.kubernetes.pod.uid"
POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"


@dataclass(frozen=True)
class ContainerRecord:
    """One container's status and the sandbox it belongs to (ContainerStatus itself does not say)."""

    sandbox_id: str
    status: api_pb2.ContainerStatus


@dataclass(frozen=True)
class PodStatus:
    """One pod as the runtime sees it; sandboxes and containers newest first. Empty when nothing of it runs."""

    uid: str
    name: str = ""
    namespace: str = ""
    # The IPs of the newest sandbox while it is ready; kept from before once it is gone (see `preserve_ips`).
    ips: tuple[str, ...] = ()
    sandboxes: tuple[api_pb2.PodSandboxStatus, ...] = ()
    containers: tuple[ContainerRecord, ...] = ()

    def object_ids(self) -> set[str]:
        return {s.id for s in self.sandboxes} | {c.status.id for c in self.containers}

    @property
    def empty(self) -> bool:
        return not self.sandboxes and not self.containers


def pod_uid(labels: Mapping[str, str]) -> str:
    """The pod UID from the kubelet's labels; "" for objects that are not the kubelet's."""
    return labels.get(POD_UID_LABEL, "")


def sandbox_ips(sandboxes: Iterable[api_pb2.PodSandboxStatus]) -> tuple[str, ...]:
    """As upstream's GetPodStatus: the IPs of the newest sandbox, and only while it is ready."""
    newest = next(iter(sandboxes), None)
    if newest is None or newest.state != api_pb2.SANDBOX_READY or not newest.network.ip:
        return ()
    return (newest.network.ip, *(p.ip for p in newest.network.additional_ips if p.ip))


def make_pod_status(
    uid: str,
    *,
    name: str = "",
    namespace: str = "",
    sandboxes: Iterable[api_pb2.PodSandboxStatus] = (),
    containers: Iterable[ContainerRecord] = (),
) -> PodStatus:
    ordered_sandboxes = tuple(sorted(sandboxes, key=lambda s: s.created_at, reverse=True))
    ordered_containers = tuple(sorted(containers, key=lambda c: c.status.created_at, reverse=True))
    if not name or not namespace:
        for labels in [*(s.labels for s in ordered_sandboxes), *(c.status.labels for c in ordered_containers)]:
            name = name or labels.get(POD_NAME_LABEL, "")
            namespace = namespace or labels.get(POD_NAMESPACE_LABEL, "")
    if ordered_sandboxes:
        name = name or ordered_sandboxes[0].metadata.name
        namespace = namespace or ordered_sandboxes[0].metadata.namespace
    return PodStatus(
        uid=uid,
        name=name,
        namespace=namespace,
        ips=sandbox_ips(ordered_sandboxes),
        sandboxes=ordered_sandboxes,
        containers=ordered_containers,
    )


def preserve_ips(new: PodStatus, old: PodStatus | None) -> PodStatus:
    """Upstream's getPodIPs: a pod whose sandboxes are all gone or stopped keeps the IPs it had.

    The API expects a finished pod to keep reporting its IP, and the network may be torn down before the last
    status is read.
    """
    if new.ips or old is None or not old.ips:
        return new
    if any(s.state == api_pb2.SANDBOX_READY for s in new.sandboxes):
        return new
    return replace(new, ips=old.ips)


def from_event(event: api_pb2.ContainerEventResponse, previous: PodStatus | None) -> PodStatus | None:
    """The pod's status after a container event, or None when the event says nothing usable about a kubelet pod.

    The event carries its sandbox's status and the statuses of every container in that sandbox (a deleted container
    is no longer among them). Sandboxes other than the event's, and their containers, come from `previous`.
    """
    if not event.HasField("pod_sandbox_status"):
        return None
    sandbox = event.pod_sandbox_status
    uid = pod_uid(sandbox.labels)
    if not uid:
        return None
    others_sandboxes: list[api_pb2.PodSandboxStatus] = []
    others_containers: list[ContainerRecord] = []
    if previous is not None:
        others_sandboxes = [s for s in previous.sandboxes if s.id != sandbox.id]
        mine = {c.id for c in event.containers_statuses}
        others_containers = [c for c in previous.containers if c.sandbox_id != sandbox.id and c.status.id not in mine]
    deleted_sandbox = event.container_event_type == api_pb2.CONTAINER_DELETED_EVENT and event.container_id == sandbox.id
    status = make_pod_status(
        uid,
        name=sandbox.metadata.name,
        namespace=sandbox.metadata.namespace,
        sandboxes=others_sandboxes if deleted_sandbox else [*others_sandboxes, sandbox],
        containers=[
            *others_containers,
            *(() if deleted_sandbox else (ContainerRecord(sandbox.id, c) for c in event.containers_statuses)),
        ],
    )
    return preserve_ips(status, previous)


def without_sandbox(status: PodStatus, sandbox_id: str) -> PodStatus:
    """The status once a sandbox and the containers in it were removed (a sandbox deletion event carries no
    status of its own, because the sandbox is gone by then)."""
    return preserve_ips(
        make_pod_status(
            status.uid,
            name=status.name,
            namespace=status.namespace,
            sandboxes=[s for s in status.sandboxes if s.id != sandbox_id],
            containers=[c for c in status.containers if c.sandbox_id != sandbox_id],
        ),
        status,
    )
