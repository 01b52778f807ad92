"""RuntimeClass: the pod's `runtimeClassName` resolved to the CRI runtime handler its sandbox runs with (upstream:
pkg/kubelet/runtimeclass, the RuntimeClass manager).

As upstream:
- the RuntimeClass objects (node.k8s.io/v1, cluster-scoped; the Node authorizer lets a node list and watch them) are
  kept in a cache by a list-and-watch, the manager's informer;
- no `runtimeClassName` (or "") is the default handler "";
- a name the cache does not hold is the lister's NotFound, `runtimeclass.node.k8s.io "NAME" not found`, which the
  runtime manager reports as the sandbox's creation failure (event FailedCreatePodSandBox), retried at the next
  sync. Before the first list the cache is empty, so a lookup is NotFound then too, as upstream's lister answers;
- the handler itself is not checked here: the runtime refuses one it does not have ("no runtime for ... is
  configured").

Without an apiserver (standalone) upstream has no manager and every pod runs with the default handler; the agent
does the same, but says so in a log line for a pod that names a RuntimeClass (`UnresolvedRuntimeClasses`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.informer import Added, Deleted, Modified, ReflectorEvent, Synced, list_and_watch

log = logging.getLogger(__name__)

GROUP = "node.k8s.io"
VERSION = "v1"
RESOURCE = "runtimeclasses"
DEFAULT_HANDLER = ""


class RuntimeClassError(Exception):
    """Root of the RuntimeClass lookup errors; the message is what upstream's error prints."""


class RuntimeClassNotFound(RuntimeClassError):
    def __init__(self, name: str) -> None:
        # The lister's NotFound: apierrors.NewNotFound(nodev1.Resource("runtimeclass"), name).Error().
        super().__init__(f'runtimeclass.{GROUP} "{name}" not found')
        self.name = name


class RuntimeHandlerResolver(Protocol):
    """Upstream's RuntimeHandlerResolver: runtimeClassName (None or "" for the default) → handler."""

    def lookup_runtime_handler(self, runtime_class_name: str | None) -> str: ...


def runtime_class_name(pod: Mapping[str, Any]) -> str | None:
    name = (pod.get("spec") or {}).get("runtimeClassName")
    return str(name) if name else None


class RuntimeClassManager:
    """The cache of RuntimeClass objects by name, kept by `run` (list and watch)."""

    def __init__(self) -> None:
        self._handlers: dict[str, str] = {}
        self.synced = False

    def apply(self, event: ReflectorEvent) -> None:
        if isinstance(event, Synced):
            self._handlers = {}
            for obj in event.objects:
                self._put(obj)
            self.synced = True
        elif isinstance(event, Added | Modified):
            self._put(event.object)
        elif isinstance(event, Deleted):
            self._handlers.pop(str((event.object.get("metadata") or {}).get("name", "")), None)

    def _put(self, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        if name:
            # node.k8s.io/v1 RuntimeClass.handler (required, a DNS label, immutable).
            self._handlers[name] = str(obj.get("handler") or "")

    def lookup_runtime_handler(self, runtime_class_name: str | None) -> str:
        """The handler of the named RuntimeClass; "" for none; raises RuntimeClassNotFound."""
        if not runtime_class_name:
            return DEFAULT_HANDLER
        handler = self._handlers.get(runtime_class_name)
        if handler is None:
            raise RuntimeClassNotFound(runtime_class_name)
        return handler

    async def run(self, client: KubeClient) -> None:
        async def on_event(event: ReflectorEvent) -> None:
            self.apply(event)
            if isinstance(event, Synced):
                log.info("runtimeclasses synced count=%d", len(self._handlers))

        await list_and_watch(client, paths.api_path(RESOURCE, group=GROUP, version=VERSION), on_event=on_event)


class UnresolvedRuntimeClasses:
    """Standalone: no apiserver to read RuntimeClasses from. As upstream (no manager without a client), every pod
    gets the default handler; a pod that names a RuntimeClass is logged, once per name, so it is not silent."""

    def __init__(self) -> None:
        self._logged: set[str] = set()

    def lookup_runtime_handler(self, runtime_class_name: str | None) -> str:
        if runtime_class_name and runtime_class_name not in self._logged:
            self._logged.add(runtime_class_name)
            log.warning(
                "runtimeclass not resolved runtime_class=%s handler=default why=standalone (no apiserver)",
                runtime_class_name,
            )
        return DEFAULT_HANDLER
