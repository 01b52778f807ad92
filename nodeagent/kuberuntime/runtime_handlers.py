"""What the runtime says it can do, from CRI Status: its handlers with their features, and its own features.

Upstream: toKubeRuntimeStatus (kuberuntime/helpers.go) converts StatusResponse.runtime_handlers and .features;
runtimeState (kubelet/runtime.go) keeps what the last Status said, taken only while the runtime is RuntimeReady;
the node status reports them (`status.runtimeHandlers`, `status.features`), and makeMounts asks whether the pod's
handler supports recursive read-only mounts. A runtime that lists no handlers (containerd 1.7) supports none of
these features, as upstream reads it.

A pod's handler is its RuntimeClass's (nodeagent.runtimeclass; "" without one): its mounts ask that handler about
recursive read-only mounts, and `hostUsers: false` asks it about user namespaces (`user_namespace_error`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cri.v1 import api_pb2

log = logging.getLogger(__name__)

DEFAULT_HANDLER = ""
RUNTIME_READY = "RuntimeReady"


@dataclass(frozen=True)
class RuntimeHandler:
    """One runtime handler (kubecontainer.RuntimeHandler); "" names the default handler."""

    name: str
    supports_recursive_read_only_mounts: bool = False
    supports_user_namespaces: bool = False


@dataclass(frozen=True)
class RuntimeFeatures:
    """The runtime's own features (kubecontainer.RuntimeFeatures)."""

    supplemental_groups_policy: bool = False


def handlers_of(response: api_pb2.StatusResponse) -> tuple[RuntimeHandler, ...]:
    """The handlers a Status response lists; a handler without features supports none."""
    return tuple(
        RuntimeHandler(
            name=h.name,
            supports_recursive_read_only_mounts=h.HasField("features") and h.features.recursive_read_only_mounts,
            supports_user_namespaces=h.HasField("features") and h.features.user_namespaces,
        )
        for h in response.runtime_handlers
    )


def features_of(response: api_pb2.StatusResponse) -> RuntimeFeatures | None:
    """The runtime's features, or None when it sends none (upstream then leaves node.status.features unset)."""
    if not response.HasField("features"):
        return None
    return RuntimeFeatures(supplemental_groups_policy=response.features.supplemental_groups_policy)


def runtime_ready(response: api_pb2.StatusResponse) -> bool:
    return any(c.type == RUNTIME_READY and c.status for c in response.status.conditions)


def supports_recursive_read_only_mounts(handler_name: str, handlers: Sequence[RuntimeHandler]) -> bool:
    """Upstream runtimeHandlerSupportsRecursiveReadOnlyMounts: no handler list means no support; a handler the
    runtime does not list has none either (and is worth a log line)."""
    if not handlers:
        return False
    for handler in handlers:
        if handler.name == handler_name:
            return handler.supports_recursive_read_only_mounts
    log.error("unknown runtime handler runtime_handler=%r", handler_name)
    return False


def handler_supports_user_namespaces(handler_name: str, handlers: Sequence[RuntimeHandler]) -> tuple[bool, str]:
    """Upstream Kubelet.HandlerSupportsUserNamespaces: (supported, why not known). No handler list (an old runtime,
    containerd 1.7) means no support; a handler the runtime does not list is an error."""
    if not handlers:
        return False, ""
    for handler in handlers:
        if handler.name == handler_name:
            return handler.supports_user_namespaces, ""
    return False, f'the handler "{handler_name}" is not known'


def user_namespace_error(pod: Mapping[str, Any], handler_name: str, handlers: Sequence[RuntimeHandler]) -> str | None:
    """Why the pod's sandbox cannot be made, from its `hostUsers`, or None (upstream
    UsernsManager.GetOrCreateUserNamespaceMappings, UserNamespacesSupport on as in v1.34).

    `hostUsers` unset or true is the node's user namespace (mode NODE, see sandbox_config.namespace_options).
    `hostUsers: false` on a handler without user-namespace support fails in upstream's words, which the runtime
    manager reports as FailedCreatePodSandBox. Where the handler does support them, upstream allocates the pod a
    65536-ID range and sends the mappings; the agent does not allocate them, so it refuses in its own words rather
    than run the pod in the node's user namespace.
    """
    if (pod.get("spec") or {}).get("hostUsers") is not False:
        return None
    supported, unknown = handler_supports_user_namespaces(handler_name, handlers)
    if not supported:
        message = "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
        if handler_name:
            message = (
                f'can\'t set `spec.hostUsers: false`, RuntimeClass handler "{handler_name}" does not support user '
                "namespaces"
            )
        return f"{message}: {unknown}" if unknown else message
    return "can't set `spec.hostUsers: false`, nodeagent does not allocate user namespace mappings"


class RuntimeState:
    """The runtime's handlers and features as the last Status said while the runtime was ready (upstream
    runtimeState.setRuntimeHandlers/setRuntimeFeatures in updateRuntimeUp). Empty until then."""

    def __init__(self) -> None:
        self._handlers: tuple[RuntimeHandler, ...] = ()
        self._features: RuntimeFeatures | None = None
        self._reported = False

    def update(self, response: api_pb2.StatusResponse) -> None:
        if not runtime_ready(response):
            return  # as upstream: a runtime that is not ready keeps the handlers it last reported
        handlers = handlers_of(response)
        if handlers != self._handlers or not self._reported:
            self._reported = True
            log.info(
                "runtime handlers handlers=%s",
                ",".join(
                    f"{h.name or '<default>'}:rro={h.supports_recursive_read_only_mounts}"
                    f":userns={h.supports_user_namespaces}"
                    for h in handlers
                )
                or "-",
            )
        self._handlers = handlers
        self._features = features_of(response)

    def handlers(self) -> tuple[RuntimeHandler, ...]:
        return self._handlers

    def features(self) -> RuntimeFeatures | None:
        return self._features

    def supports_recursive_read_only_mounts(self, handler_name: str = DEFAULT_HANDLER) -> bool:
        return supports_recursive_read_only_mounts(handler_name, self._handlers)
