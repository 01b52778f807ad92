"""The node's own Node object, kept current by the reflector (upstream: the kubelet's node informer, a list and watch
of `metadata.name=<node>`, which the Node authorizer allows; admission and mirror pods read it through the node
lister).

Until the first list has arrived, or while the Node does not exist in the watch's view, `node()` answers from the
fallback: the object the node status manager last got back from the apiserver. Admission needs the labels as they
are now: a pod created just after its node was labelled (a DaemonSet moving onto a relabelled node, a spec that
labels a node and at once creates pods with node affinity) was refused `NodeAffinity` against the status manager's
copy, which is only refreshed at the next status tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.informer import Added, Deleted, Modified, ReflectorEvent, Synced, list_and_watch

log = logging.getLogger(__name__)

Node = dict[str, Any]


def _resource_version(node: Node | None) -> int | None:
    """The object's resourceVersion as a number, where it is one (etcd's revisions are), else None."""
    value = ((node or {}).get("metadata") or {}).get("resourceVersion")
    return int(value) if isinstance(value, str) and value.isdigit() else None


class NodeStore:
    def __init__(self, name: str, fallback: Callable[[], Node | None]) -> None:
        self._name = name
        self._fallback = fallback
        self._watched: Node | None = None
        self.synced = False

    def _mine(self, node: Node) -> bool:
        return bool((node.get("metadata") or {}).get("name") == self._name)

    def apply(self, event: ReflectorEvent) -> None:
        if isinstance(event, Synced):
            self._watched = next((obj for obj in event.objects if self._mine(obj)), None)
            self.synced = True
        elif isinstance(event, Added | Modified) and self._mine(event.object):
            self._watched = event.object
        elif isinstance(event, Deleted) and self._mine(event.object):
            self._watched = None

    def node(self) -> Node | None:
        """The newest view of the Node: the watched object, or the status manager's copy where that is newer (its
        own patch, answered before the watch delivers it) or the watch has none."""
        fallback = self._fallback()
        watched = self._watched
        if watched is None:
            return fallback
        if fallback is None:
            return watched
        watched_rv, fallback_rv = _resource_version(watched), _resource_version(fallback)
        if watched_rv is not None and fallback_rv is not None and fallback_rv > watched_rv:
            return fallback
        return watched

    async def run(self, client: KubeClient) -> None:
        async def on_event(event: ReflectorEvent) -> None:
            self.apply(event)

        await list_and_watch(client, paths.nodes(), field_selector=f"metadata.name={self._name}", on_event=on_event)
