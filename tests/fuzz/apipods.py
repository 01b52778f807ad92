"""Pods as they come from the apiserver: schema-shaped (every field of its schema type), odd values. Each case goes
where an API pod goes in the agent: PodConfig's merge (`PodStorage.merge`), admission (`admission.admit` with the
sysctl allowlist and a Node), the runtime manager's `compute_pod_actions` against an empty runtime, the sandbox
config (`make_sandbox_config`) and every container's config (`make_container_config`: environment, resources,
security context, labels, hash). Documented errors: `KubeRuntimeError` (CreateContainerConfigError,
CreatePodSandboxConfigError), which the pod worker turns into the container's waiting reason."""

from __future__ import annotations

from typing import Any

from nodeagent.admission.predicates import admit
from nodeagent.admission.sysctls import new_allowlist
from nodeagent.kuberuntime.actions import RuntimePodStatus, compute_pod_actions
from nodeagent.kuberuntime.backoff import Backoff
from nodeagent.kuberuntime.container_config import make_container_config
from nodeagent.kuberuntime.errors import KubeRuntimeError
from nodeagent.kuberuntime.sandbox_config import DNSSettings, ResolvConf, make_sandbox_config
from nodeagent.podconfig.storage import Operation, PodStorage, SourceUpdate
from tests.fuzz.engine import Target
from tests.fuzz.podgen import api_pods

_NODE: dict[str, Any] = {
    "metadata": {"name": "node", "labels": {"kubernetes.io/hostname": "node", "kubernetes.io/os": "linux"}},
    "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoExecute"}]},
    "status": {
        "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110", "ephemeral-storage": "10Gi"},
        "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
    },
}
_SYSCTLS = new_allowlist(["net.core.*", "kernel.msg*"], kernel=(6, 1))
_DNS = DNSSettings(
    cluster_dns=("198.19.0.10",),
    host=ResolvConf(nameservers=("198.18.0.1",), searches=("example.org",), options=("ndots:2",)),
)


def _lookup(namespace: str, name: str) -> dict[str, str] | None:
    return {"key": "value", "a": "b"} if name in ("web", "app") else None


def run(pod: dict[str, Any]) -> None:
    storage = PodStorage(now=lambda: "now")
    storage.merge(SourceUpdate("api", Operation.SET, (pod,)))
    storage.merge(SourceUpdate("api", Operation.UPDATE, (pod,)))
    admit(pod, _NODE, [pod], sysctls=_SYSCTLS)
    compute_pod_actions(pod, RuntimePodStatus(uid=str(pod["metadata"]["uid"])), now=0.0, backoff=Backoff())
    make_sandbox_config(pod, attempt=0, cgroup_parent="/kubepods/podx", dns=_DNS)
    spec = pod["spec"]
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(key) or []:
            try:
                make_container_config(
                    pod,
                    container,
                    restart_count=0,
                    pod_ips=["198.18.0.5"],
                    node_name="node",
                    host_ip="198.18.0.1",
                    service_env={"KUBERNETES_SERVICE_HOST": "198.19.0.1"},
                    image_ref="sha256:00",
                    memory_capacity=4 << 30,
                    node_allocatable={"cpu": "2", "memory": "4Gi", "ephemeral-storage": "10Gi"},
                    get_config_map=_lookup,
                    get_secret=_lookup,
                    image_user=str(container.get("name", "")),
                )
            except KubeRuntimeError:
                continue  # the next container is still built, as the pod worker does


TARGET = Target("apipods", api_pods, run, (KubeRuntimeError,), __doc__ or "")
