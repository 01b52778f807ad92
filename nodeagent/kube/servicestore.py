"""Every Service in the cluster, kept in step by the reflector (upstream: the kubelet's service informer, which the
Node authorizer lets a node list and watch). The runtime manager reads it for the containers' Service environment
variables; until the first list has arrived it is not `synced`, and containers wait, as upstream's "services have not
yet been read at least once, cannot construct envvars"."""

from __future__ import annotations

import logging
from typing import Any

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.informer import Added, Deleted, Modified, ReflectorEvent, Synced, list_and_watch

log = logging.getLogger(__name__)

Service = dict[str, Any]


def _key(service: Service) -> str:
    meta = service.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class ServiceStore:
    def __init__(self) -> None:
        self._services: dict[str, Service] = {}
        self.synced = False

    def apply(self, event: ReflectorEvent) -> None:
        if isinstance(event, Synced):
            self._services = {_key(s): s for s in event.objects}
            self.synced = True
        elif isinstance(event, Added | Modified):
            self._services[_key(event.object)] = event.object
        elif isinstance(event, Deleted):
            self._services.pop(_key(event.object), None)

    def list(self) -> list[Service]:
        return list(self._services.values())

    async def run(self, client: KubeClient) -> None:
        async def on_event(event: ReflectorEvent) -> None:
            self.apply(event)

        await list_and_watch(client, paths.api_path("services"), on_event=on_event)
