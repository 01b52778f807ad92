"""The apiserver pod source: list+watch of the pods bound to this node, as SourceUpdates for PodConfig.

The reflector (nodeagent.kube.informer) does the list, the watch from the list's resourceVersion, the relist on
410 Gone and the reconnect backoff; this module only translates its events: a (re)list is a SET of every pod
(so pods deleted while the watch was down are REMOVEd), and watch events are ADD / UPDATE / REMOVE.

`SharedPodSource` is the same source for many nodes in one process (`nodeagent fleet --pod-watch shared`): ONE
list+watch of every bound pod, demultiplexed by spec.nodeName, so that each node's PodConfig gets what its own
source would have given it. The apiserver cannot select "nodeName in (these nodes)" (a field selector is a
conjunction of = and !=, and pods carry no node label), so the watch asks for every pod bound to some node
(`spec.nodeName!=`, which keeps the scheduler's churn of pending pods off the stream) and drops those bound to a
node that is not one of ours.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.informer import Added, Deleted, Modified, ReflectorEvent, Synced, list_and_watch
from nodeagent.kube.request import Obj
from nodeagent.podconfig.storage import Operation, SourceUpdate

log = logging.getLogger(__name__)

SOURCE = "api"
# Every pod bound to a node: what the shared watch asks for (see the module docstring).
BOUND_PODS = "spec.nodeName!="

PodSink = Callable[[SourceUpdate], None]


def translate(event: ReflectorEvent) -> SourceUpdate:
    if isinstance(event, Synced):
        return SourceUpdate(SOURCE, Operation.SET, tuple(event.objects))
    if isinstance(event, Added):
        return SourceUpdate(SOURCE, Operation.ADD, (event.object,))
    if isinstance(event, Modified):
        return SourceUpdate(SOURCE, Operation.UPDATE, (event.object,))
    if isinstance(event, Deleted):
        return SourceUpdate(SOURCE, Operation.REMOVE, (event.object,))
    raise TypeError(f"unexpected reflector event {event!r}")


async def run_apiserver_source(client: KubeClient, node_name: str, push: Callable[[SourceUpdate], None]) -> None:
    """Runs until cancelled."""

    async def on_event(event: ReflectorEvent) -> None:
        push(translate(event))

    log.info("pod source started source=%s node=%s", SOURCE, node_name)
    await list_and_watch(client, paths.pods(), field_selector=f"spec.nodeName={node_name}", on_event=on_event)


class SharedPodWatchStopped(RuntimeError):
    """The shared watch ended (a bug, or the fleet stopping): the nodes' sources end with it."""


def _node_of(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _uid_of(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


class SharedPodSource:
    """One list+watch of the pods of `nodes`, fanned out to each node's PodConfig (see the module docstring).

    `run` is the watch; `source(node, push)` is a node's pod source, used in place of `run_apiserver_source`. The
    pods of every node of ours are kept (by node, then uid), so that a node whose source starts late gets the SET
    its own list would have given it; a node's first SET comes only once the shared list has arrived, so its
    sources_ready waits for it as for its own list. A (re)list (410 Gone included) is a SET to every node, watch
    events go to the node each pod names: a pod deleted and created again with the same name is a REMOVE of the old
    uid, then an ADD of the new, wherever each is bound. spec.nodeName is immutable once set, so a pod never moves."""

    def __init__(self, nodes: Iterable[str]) -> None:
        self._nodes = frozenset(nodes)
        self._pods: dict[str, dict[str, Obj]] = {}  # node -> uid -> pod, for our nodes only
        self._sinks: dict[str, PodSink] = {}
        self._synced = False
        self._resource_version = ""  # the last list's
        self._stopped = asyncio.Event()
        self.dropped = 0  # events of pods bound to other nodes

    async def run(self, client: KubeClient) -> None:
        """The shared list+watch, until cancelled; the nodes' sources end when it does."""
        log.info("shared pod watch started source=%s nodes=%d field_selector=%s", SOURCE, len(self._nodes), BOUND_PODS)
        try:
            await list_and_watch(client, paths.pods(), field_selector=BOUND_PODS, on_event=self.on_event)
        finally:
            self._stopped.set()

    async def on_event(self, event: ReflectorEvent) -> None:
        if isinstance(event, Synced):
            self._pods = {}
            for pod in event.objects:
                node = _node_of(pod)
                if node in self._nodes:
                    self._pods.setdefault(node, {})[_uid_of(pod)] = pod
            self._synced = True
            self._resource_version = event.resource_version
            for node, push in self._sinks.items():
                push(self._snapshot(node))
            return
        node = _node_of(event.object)
        if node not in self._nodes:
            self.dropped += 1
            return
        pods = self._pods.setdefault(node, {})
        if isinstance(event, Deleted):
            pods.pop(_uid_of(event.object), None)
        else:
            pods[_uid_of(event.object)] = event.object
        sink = self._sinks.get(node)
        if sink is not None:
            sink(translate(event))

    def _snapshot(self, node: str) -> SourceUpdate:
        return translate(Synced(tuple(self._pods.get(node, {}).values()), self._resource_version))

    async def source(self, node_name: str, push: PodSink) -> None:
        """`node_name`'s pod source: its SET once the shared list is in, then its pods' changes, until cancelled."""
        if node_name not in self._nodes:
            raise ValueError(f"node {node_name!r} is not one of the shared pod watch's nodes")
        if node_name in self._sinks:
            raise ValueError(f"node {node_name!r} already has a pod source on the shared pod watch")
        self._sinks[node_name] = push
        log.info("pod source started source=%s node=%s watch=shared synced=%s", SOURCE, node_name, self._synced)
        try:
            if self._synced:
                push(self._snapshot(node_name))
            await self._stopped.wait()
            raise SharedPodWatchStopped(f"the shared pod watch ended; node {node_name} has no pod source")
        finally:
            del self._sinks[node_name]
