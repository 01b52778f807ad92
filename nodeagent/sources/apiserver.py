"""The apiserver pod source: list+watch of the pods bound to this node, as SourceUpdates for PodConfig.

The reflector (nodeagent.kube.informer) does the list, the watch from the list's resourceVersion, the relist on
410 Gone and the reconnect backoff; this module only translates its events: a (re)list is a SET of every pod
(so pods deleted while the watch was down are REMOVEd), and watch events are ADD / UPDATE / REMOVE.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.informer import Added, Deleted, Modified, ReflectorEvent, Synced, list_and_watch
from nodeagent.podconfig.storage import Operation, SourceUpdate

log = logging.getLogger(__name__)

SOURCE = "api"


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
