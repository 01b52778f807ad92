"""The agent as the kubelet API sees it: `AgentHost` implements `ServerHost` over the agent's own parts (the pod
config, the status manager, the runtime, the mirror pods and the metric registries), passed in as narrow callables.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from nodeagent.config.durations import format_go_duration
from nodeagent.kuberuntime import actions as acts

Pod = dict[str, Any]
CONFIG_MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    out: Mapping[str, Any] = pod.get("metadata") or {}
    return out


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def config_json(value: Any) -> Any:
    """A config dataclass as JSON with the KubeletConfiguration's camelCase names and Go durations (for /configz)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {_camel(f.name): config_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime.timedelta):
        return format_go_duration(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): config_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [config_json(v) for v in value]
    return value


def bare_pod(status: acts.RuntimePodStatus) -> Pod:
    """What /runningpods shows of a runtime pod: name, namespace, UID and its containers (upstream's runtime Pod
    converted to a v1 Pod)."""
    containers = []
    seen: set[str] = set()
    for c in status.containers:
        if c.name in seen:
            continue
        seen.add(c.name)
        containers.append({"name": c.name, "image": c.image})
    return {
        "metadata": {"name": status.name, "namespace": status.namespace, "uid": status.uid},
        "spec": {"containers": containers},
    }


@dataclass
class AgentHost:
    pods_fn: Callable[[], list[Pod]]  # every source's pods (mirror pods included)
    status_of: Callable[[str], Mapping[str, Any] | None]  # by UID
    static_pods_of: Callable[[Pod], list[Pod]]  # a mirror pod's static pod(s)
    list_runtime_pods: Callable[[], Any]  # async () -> dict[uid, RuntimePodStatus]
    runtime_pod: Callable[[str], Any]  # async (uid) -> RuntimePodStatus, straight from the runtime
    config: Any
    registries: Mapping[str, CollectorRegistry]  # path (/metrics, /metrics/probes) -> registry
    syncloop_health: Callable[[], tuple[bool, str]] = lambda: (True, "")

    def pods(self) -> list[Pod]:
        out = []
        for pod in self.pods_fn():
            if CONFIG_MIRROR_ANNOTATION in (_meta(pod).get("annotations") or {}):
                continue
            status = self.status_of(str(_meta(pod).get("uid", "")))
            out.append({**pod, "status": status} if status is not None else pod)
        return out

    def pod_by_name(self, namespace: str, name: str) -> Pod | None:
        matches = [p for p in self.pods_fn() if _meta(p).get("namespace") == namespace and _meta(p).get("name") == name]
        for pod in matches:
            if CONFIG_MIRROR_ANNOTATION not in (_meta(pod).get("annotations") or {}):
                return pod
        for mirror in matches:
            statics = self.static_pods_of(mirror)
            if statics:
                return statics[0]
        return None

    def pod_status(self, pod: Pod) -> Mapping[str, Any] | None:
        return self.status_of(str(_meta(pod).get("uid", "")))

    async def running_pods(self) -> list[Pod]:
        listed: Mapping[str, acts.RuntimePodStatus] = await self.list_runtime_pods()
        return [
            bare_pod(status)
            for status in listed.values()
            if any(c.state is acts.ContainerState.RUNNING for c in status.containers)
        ]

    async def running_container_id(self, pod: Pod, container: str) -> str | None:
        status: acts.RuntimePodStatus = await self.runtime_pod(str(_meta(pod).get("uid", "")))
        for c in status.containers:  # newest first
            if c.name == container and c.state is acts.ContainerState.RUNNING:
                return c.id
        return None

    async def running_sandbox_id(self, pod: Pod) -> str | None:
        status: acts.RuntimePodStatus = await self.runtime_pod(str(_meta(pod).get("uid", "")))
        ready: Sequence[acts.SandboxStatus] = [s for s in status.sandboxes if s.state is acts.SandboxState.READY]
        return ready[0].id if ready else None

    def syncloop_healthy(self) -> tuple[bool, str]:
        return self.syncloop_health()

    def configz(self) -> Mapping[str, Any]:
        out: Mapping[str, Any] = config_json(self.config)
        return out

    def metrics(self, path: str) -> bytes | None:
        registry = self.registries.get(path.rstrip("/") or "/metrics")
        return generate_latest(registry) if registry is not None else None
