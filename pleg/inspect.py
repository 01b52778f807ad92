"""Reading the runtime: the cheap list a relist diffs, and the full status of one pod.

A relist costs two calls whatever the number of pods (ListPodSandbox + ListContainers); only pods whose objects
changed state are then inspected (PodSandboxStatus + ContainerStatus per object). Every call carries a timeout, so a
runtime that stops answering makes a relist fail instead of hang. `get_pod_status` is the direct path (list by the
pod's UID label, then inspect) for the few readers that must bypass the cache, as upstream's GetPodStatus.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from cri.errors import NotFoundError
from cri.service import RuntimeService
from cri.v1 import api_pb2
from pleg.status import (
    POD_NAME_LABEL,
    POD_NAMESPACE_LABEL,
    POD_UID_LABEL,
    ContainerRecord,
    PodStatus,
    make_pod_status,
    pod_uid,
)

_T = TypeVar("_T")


@dataclass(frozen=True)
class RuntimeObject:
    """A sandbox or a container as a list call shows it: enough to notice a change of state."""

    id: str
    state: int  # the CRI enum: PodSandboxState for sandboxes, ContainerState for containers
    sandbox_id: str = ""  # containers only


@dataclass(frozen=True)
class RuntimePod:
    """The kubelet pod with this UID as the last list showed it (upstream: kubecontainer.Pod)."""

    uid: str
    name: str = ""
    namespace: str = ""
    sandboxes: tuple[RuntimeObject, ...] = ()
    containers: tuple[RuntimeObject, ...] = ()


def _by_id(obj: RuntimeObject) -> str:
    return obj.id


def group_pods(
    sandboxes: Iterable[api_pb2.PodSandbox], containers: Iterable[api_pb2.Container]
) -> dict[str, RuntimePod]:
    """List answers grouped by the kubelet's pod UID label; objects without it are not ours and are left out.

    Objects are sorted by ID, so two lists of an unchanged pod compare equal (the runtime lists in any order).
    """
    names: dict[str, tuple[str, str]] = {}
    found_sandboxes: dict[str, list[RuntimeObject]] = {}
    found_containers: dict[str, list[RuntimeObject]] = {}
    for sandbox in sandboxes:
        uid = pod_uid(sandbox.labels)
        if uid:
            names.setdefault(uid, (sandbox.labels.get(POD_NAME_LABEL, ""), sandbox.labels.get(POD_NAMESPACE_LABEL, "")))
            found_sandboxes.setdefault(uid, []).append(RuntimeObject(sandbox.id, sandbox.state))
    for container in containers:
        uid = pod_uid(container.labels)
        if uid:
            names.setdefault(
                uid, (container.labels.get(POD_NAME_LABEL, ""), container.labels.get(POD_NAMESPACE_LABEL, ""))
            )
            found_containers.setdefault(uid, []).append(
                RuntimeObject(container.id, container.state, container.pod_sandbox_id)
            )
    return {
        uid: RuntimePod(
            uid,
            name,
            namespace,
            tuple(sorted(found_sandboxes.get(uid, ()), key=_by_id)),
            tuple(sorted(found_containers.get(uid, ()), key=_by_id)),
        )
        for uid, (name, namespace) in names.items()
    }


async def list_pods(runtime: RuntimeService, *, timeout: float | None) -> dict[str, RuntimePod]:
    """Every kubelet pod the runtime knows: the two list calls of a relist."""
    sandboxes = await runtime.list_pod_sandbox(timeout=timeout)
    containers = await runtime.list_containers(timeout=timeout)
    return group_pods(sandboxes, containers)


async def list_pod(runtime: RuntimeService, uid: str, *, timeout: float | None) -> RuntimePod | None:
    """One pod's objects, listed by its UID label; None when the runtime has nothing of it."""
    selector = {POD_UID_LABEL: uid}
    sandboxes = await runtime.list_pod_sandbox(api_pb2.PodSandboxFilter(label_selector=selector), timeout=timeout)
    containers = await runtime.list_containers(api_pb2.ContainerFilter(label_selector=selector), timeout=timeout)
    return group_pods(sandboxes, containers).get(uid)


async def inspect_pod(runtime: RuntimeService, pod: RuntimePod, *, timeout: float | None) -> PodStatus:
    """The full status of a listed pod. An object removed since the list is left out (NotFound), as upstream."""

    async def sandbox(obj: RuntimeObject) -> api_pb2.PodSandboxStatus | None:
        try:
            return (await runtime.pod_sandbox_status(obj.id, timeout=timeout)).status
        except NotFoundError:
            return None

    async def container(obj: RuntimeObject) -> ContainerRecord | None:
        try:
            resp = await runtime.container_status(obj.id, timeout=timeout)
        except NotFoundError:
            return None
        return ContainerRecord(obj.sandbox_id, resp.status)

    sandboxes = await asyncio.gather(*(sandbox(s) for s in pod.sandboxes))
    containers = await asyncio.gather(*(container(c) for c in pod.containers))
    return make_pod_status(
        pod.uid,
        name=pod.name,
        namespace=pod.namespace,
        sandboxes=_present(sandboxes),
        containers=_present(containers),
    )


async def get_pod_status(runtime: RuntimeService, uid: str, *, timeout: float | None = None) -> PodStatus:
    """Straight from the runtime, bypassing the cache (upstream's GetPodStatus)."""
    pod = await list_pod(runtime, uid, timeout=timeout)
    if pod is None:
        return PodStatus(uid=uid)
    return await inspect_pod(runtime, pod, timeout=timeout)


def _present(items: Sequence[_T | None]) -> list[_T]:
    return [item for item in items if item is not None]
