"""The agent as the kubelet API sees it: `AgentHost` implements `ServerHost` over the agent's own parts (the pod
config, the status manager, the runtime, the mirror pods, the metric registries and the stats provider), passed in
as narrow callables.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from nodeagent.config import KubeletConfiguration, encode_document
from nodeagent.config.durations import format_go_duration
from nodeagent.config.upstreamonly import reported_fields
from nodeagent.kuberuntime import actions as acts
from nodeagent.localserver import running_pods
from nodeagent.server import metricstext
from nodeagent.staticpods import is_mirror_pod
from nodeagent.stats.cadvisor import CadvisorContainer, cadvisor_metrics
from nodeagent.stats.errors import StatsError
from nodeagent.stats.resource_metrics import resource_metrics
from nodeagent.stats.types import Summary, summary_json

log = logging.getLogger(__name__)

Pod = dict[str, Any]


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
    status_of: Callable[[str], dict[str, Any] | None]  # by UID
    static_pods_of: Callable[[Pod], list[Pod]]  # a mirror pod's static pod(s)
    list_runtime_pods: Callable[[], Any]  # async () -> dict[uid, RuntimePodStatus]
    runtime_pod: Callable[[str], Any]  # async (uid) -> RuntimePodStatus, straight from the runtime
    config: Any
    registries: Mapping[str, CollectorRegistry]  # path (/metrics, /metrics/probes) -> registry
    syncloop_health: Callable[[], tuple[bool, str]] = lambda: (True, "")
    # the stats provider's StatsProvider.summary and .cadvisor_containers (None: no provider, the routes fail)
    stats_summary: Callable[[bool], Awaitable[Summary]] | None = None
    cadvisor_containers: Callable[[], Awaitable[list[CadvisorContainer]]] | None = None

    def pods(self) -> list[Pod]:
        return running_pods(self.pods_fn(), self.status_of)

    def pod_by_name(self, namespace: str, name: str) -> Pod | None:
        matches = [p for p in self.pods_fn() if _meta(p).get("namespace") == namespace and _meta(p).get("name") == name]
        for pod in matches:
            if not is_mirror_pod(pod):
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
        """The config as upstream's /configz shows it: v1beta1 names and spellings (clusterDNS,
        imageGCHighThresholdPercent), every field, and the upstream-only fields at the value nodeagent's behaviour
        matches, so a file written back from it (the node e2e suite does) loads again."""
        if not isinstance(self.config, KubeletConfiguration):
            out: Mapping[str, Any] = config_json(self.config)
            return out
        doc = encode_document(self.config)
        return {**reported_fields(), **{k: v for k, v in doc.items() if k not in ("apiVersion", "kind")}}

    def metrics(self, path: str) -> bytes | None:
        registry = self.registries.get(path.rstrip("/") or "/metrics")
        return metricstext.render(registry) if registry is not None else None

    async def _summary(self, only_cpu_and_memory: bool) -> Summary:
        if self.stats_summary is None:
            raise StatsError("no stats provider")
        return await self.stats_summary(only_cpu_and_memory)

    async def summary(self, only_cpu_and_memory: bool) -> Mapping[str, Any]:
        return summary_json(await self._summary(only_cpu_and_memory))

    async def resource_metrics(self) -> bytes:
        try:
            found: Summary | None = await self._summary(True)
        except StatsError as exc:
            # as upstream's collector: the scrape still answers, with resource_scrape_error 1
            log.error("resource metrics summary failed error=%s", exc)
            found = None
        return resource_metrics(found).encode()

    async def cadvisor_metrics(self) -> bytes:
        rows: list[CadvisorContainer] | None = None
        try:
            if self.cadvisor_containers is None:
                raise StatsError("no stats provider")
            rows = await self.cadvisor_containers()
        except StatsError as exc:
            log.warning("cadvisor metrics listing failed error=%s", exc)
        return cadvisor_metrics(rows).encode()
