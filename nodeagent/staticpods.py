"""Static pods inside the kubelet: their mirror pods in the apiserver, and one running pod per full name.

Mirror pods (upstream: pkg/kubelet/pod mirror_client.go, the mirror half of pod_manager.go, SyncPod's mirror step
and HandlePodCleanups' deleteOrphanedMirrorPods):

- A static pod shows in the apiserver as its mirror pod: the same name, namespace, labels, annotations and spec,
  plus the annotation kubernetes.io/config.mirror holding the static pod's config hash, and an ownerReference to this
  Node (controller, no blockOwnerDeletion). That is exactly what NodeRestriction lets a node create: a pod bound to
  itself, owned by itself, referencing no other API object.
- Mirror pods come back through the apiserver source like any pod. The kubelet never runs them; a change to one only
  prompts a sync of its static pod.
- Syncing a static pod puts its mirror right: a mirror being deleted (a user's `kubectl delete`, graceful or not) or
  mirroring another version of the pod (another hash) is deleted with grace 0 and a UID precondition, and a missing
  one is created. So a deleted mirror comes back, and an edited manifest gets a new mirror with its new hash.
- Housekeeping deletes mirror pods whose static pod is gone, once that pod has finished terminating.
- The status manager reports a static pod's status on its mirror: `MirrorPods.api_uid` translates the static UID to
  the mirror's (upstream: TranslatePodUID).

The start gate (upstream: podWorkers' allowStaticPodStart): of the static pods sharing a full name (an edited
manifest, whose old pod is still terminating when the new one arrives), one runs at a time; the next starts once the
one before has finished terminating.

The decisions are pure functions; `MirrorPods` only carries them out through the node's API client, and never
raises on an API error (the next sync tries again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import AlreadyExists, ApiError, ApiUnavailable, Conflict, NotFound
from nodeagent.podconfig.storage import CONFIG_MIRROR_ANNOTATION, CONFIG_SOURCE_ANNOTATION, pod_full_name
from nodeagent.podconfig.storage import pod_ref as _ref

log = logging.getLogger(__name__)

Pod = dict[str, Any]
API_SOURCE = "api"
CONFIG_HASH_ANNOTATION = "kubernetes.io/config.hash"


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    annotations = _meta(pod).get("annotations")
    return annotations if isinstance(annotations, Mapping) else {}


def _uid(pod: Mapping[str, Any]) -> str:
    return str(_meta(pod).get("uid", ""))


def is_mirror_pod(pod: Mapping[str, Any]) -> bool:
    return CONFIG_MIRROR_ANNOTATION in _annotations(pod)


def is_static_pod(pod: Mapping[str, Any]) -> bool:
    """A pod from a source other than the apiserver (upstream: IsStaticPod)."""
    source = _annotations(pod).get(CONFIG_SOURCE_ANNOTATION)
    return source is not None and source != API_SOURCE


def full_name(pod: Mapping[str, Any]) -> str:
    return pod_full_name(dict(pod))


def is_mirror_pod_of(mirror: Mapping[str, Any], static: Mapping[str, Any]) -> bool:
    """The mirror pod shows this version of the static pod: same full name and the static pod's hash."""
    wanted = _annotations(static).get(CONFIG_HASH_ANNOTATION)
    return (
        wanted is not None
        and full_name(mirror) == full_name(static)
        and _annotations(mirror).get(CONFIG_MIRROR_ANNOTATION) == wanted
    )


def build_mirror_pod(static: Mapping[str, Any], *, node_name: str, node_uid: str) -> Pod:
    """What to create in the apiserver for `static` (upstream: CreateMirrorPod's copy of the pod)."""
    meta = _meta(static)
    annotations = {str(k): str(v) for k, v in _annotations(static).items()}
    annotations[CONFIG_MIRROR_ANNOTATION] = str(annotations.get(CONFIG_HASH_ANNOTATION, ""))
    metadata: dict[str, Any] = {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "annotations": annotations,
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}
        ],
    }
    if meta.get("labels"):
        metadata["labels"] = dict(meta["labels"])
    spec = dict(static.get("spec") or {})
    spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@dataclass(frozen=True)
class MirrorActions:
    delete_uid: str | None = None  # the mirror pod to delete first (grace 0, UID precondition)
    create: bool = False


def mirror_actions(static: Mapping[str, Any], mirror: Mapping[str, Any] | None) -> MirrorActions:
    """What a sync of `static` does to its mirror pod (upstream: the mirror step of SyncPod)."""
    if mirror is None:
        return MirrorActions(create=True)
    if _meta(mirror).get("deletionTimestamp") or not is_mirror_pod_of(mirror, static):
        return MirrorActions(delete_uid=_uid(mirror), create=True)
    return MirrorActions()


def orphaned_mirror_pods(pods: Iterable[Mapping[str, Any]], busy_full_names: set[str]) -> list[Mapping[str, Any]]:
    """Mirror pods whose static pod is gone and no longer terminating (upstream: GetOrphanedMirrorPodNames)."""
    pods = list(pods)
    static_names = {full_name(p) for p in pods if is_static_pod(p)}
    return [
        p for p in pods if is_mirror_pod(p) and full_name(p) not in static_names and full_name(p) not in busy_full_names
    ]


@dataclass
class StaticPodGate:
    """One started static pod per full name (upstream: startedStaticPodsByFullname)."""

    _started: dict[str, str] = field(default_factory=dict)  # full name -> UID

    def allow_start(self, pod: Mapping[str, Any], *, alive: Callable[[str], bool]) -> bool:
        name, uid = full_name(pod), _uid(pod)
        owner = self._started.get(name)
        if owner is None or owner == uid or not alive(owner):
            self._started[name] = uid
            return True
        return False

    def finished(self, pod: Mapping[str, Any]) -> None:
        name = full_name(pod)
        if self._started.get(name) == _uid(pod):
            del self._started[name]


class MirrorPods:
    """Creates and deletes mirror pods through the node's credential; knows each static pod's mirror."""

    def __init__(
        self,
        client: KubeClient,
        *,
        node_name: str,
        pods_by_full_name: Callable[[str], list[Pod]],
        pod_by_uid: Callable[[str], Mapping[str, Any] | None],
        node: Callable[[], Mapping[str, Any] | None],
    ) -> None:
        self._client = client
        self._node_name = node_name
        self._pods_by_full_name = pods_by_full_name
        self._pod_by_uid = pod_by_uid
        self._node = node
        self.created = 0
        self.deleted = 0

    def mirror_pod_of(self, static: Mapping[str, Any]) -> Pod | None:
        """The mirror pod in the apiserver under the static pod's full name, whichever version it mirrors."""
        return next((p for p in self._pods_by_full_name(full_name(static)) if is_mirror_pod(p)), None)

    def static_pods_of(self, mirror: Mapping[str, Any]) -> list[Pod]:
        return [p for p in self._pods_by_full_name(full_name(mirror)) if is_static_pod(p)]

    def api_uid(self, uid: str) -> str | None:
        """The UID of the API object that carries this pod's status: the pod itself, or a static pod's current
        mirror. None when there is none (yet): a static pod without its mirror, or a pod no source knows."""
        pod = self._pod_by_uid(uid)
        if pod is None:
            return None
        if not is_static_pod(pod):
            return uid
        mirror = self.mirror_pod_of(pod)
        if mirror is None or _meta(mirror).get("deletionTimestamp") or not is_mirror_pod_of(mirror, pod):
            return None
        return _uid(mirror)

    async def sync(self, static: Mapping[str, Any]) -> None:
        """Make the static pod's mirror right (see the module docstring). Never raises on API errors."""
        mirror = self.mirror_pod_of(static)
        actions = mirror_actions(static, mirror)
        try:
            if actions.delete_uid is not None and mirror is not None:
                log.info(
                    "mirror pod deleted, it is being deleted or out of date pod=%s mirror_uid=%s",
                    _ref(static),
                    actions.delete_uid,
                )
                await self.delete(mirror)
            if actions.create:
                await self._create(static)
        except (ApiError, ApiUnavailable) as exc:
            log.warning("mirror pod not synced, will retry pod=%s error=%s", _ref(static), exc)

    async def delete(self, mirror: Mapping[str, Any]) -> bool:
        """Delete with grace 0 and the mirror's UID as precondition. False when it was already gone or replaced."""
        try:
            await self._client.delete(
                paths.pod(str(_meta(mirror)["namespace"]), str(_meta(mirror)["name"])),
                grace_period_seconds=0,
                preconditions_uid=_uid(mirror) or None,
            )
        except (NotFound, Conflict):
            return False
        self.deleted += 1
        return True

    async def _create(self, static: Mapping[str, Any]) -> None:
        node = self._node()
        node_meta = _meta(node) if node is not None else {}
        if not node_meta.get("uid"):
            log.debug("mirror pod not created, the node is not registered yet pod=%s", _ref(static))
            return
        if node_meta.get("deletionTimestamp"):
            log.debug("mirror pod not created, the node is being deleted pod=%s", _ref(static))
            return
        body = build_mirror_pod(static, node_name=self._node_name, node_uid=str(node_meta["uid"]))
        namespace = str(_meta(static)["namespace"])
        try:
            created = await self._client.create(paths.pods(namespace), body)
        except AlreadyExists:
            # Created by an earlier sync whose watch event has not arrived yet, or left by another version.
            existing = await self._client.get(paths.pod(namespace, str(_meta(static)["name"])))
            if not is_mirror_pod_of(existing, static):
                log.warning(
                    "mirror pod not created, another pod has its name pod=%s existing_uid=%s",
                    _ref(static),
                    _uid(existing),
                )
            return
        self.created += 1
        log.info("mirror pod created pod=%s static_uid=%s mirror_uid=%s", _ref(static), _uid(static), _uid(created))

    async def delete_orphans(self, pods: Iterable[Mapping[str, Any]], busy_full_names: set[str]) -> None:
        """Housekeeping: delete the mirror pods of static pods that are gone. Never raises on API errors."""
        for mirror in orphaned_mirror_pods(pods, busy_full_names):
            try:
                if await self.delete(mirror):
                    log.info("orphaned mirror pod deleted pod=%s mirror_uid=%s", _ref(mirror), _uid(mirror))
            except (ApiError, ApiUnavailable) as exc:
                log.warning("orphaned mirror pod not deleted, will retry pod=%s error=%s", _ref(mirror), exc)
