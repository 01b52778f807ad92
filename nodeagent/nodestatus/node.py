"""The Node object the kubelet registers and the status it keeps posting (kubelet_node_status.go)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodeagent.config import KubeletConfiguration
from nodeagent.kuberuntime.runtime_handlers import RuntimeFeatures, RuntimeHandler
from nodeagent.nodestatus.facts import NodeFacts
from nodeagent.nodestatus.labels import node_labels
from nodeagent.nodestatus.resources import allocatable, capacity
from nodeagent.nodestatus.runtime_handlers import node_features_status, runtime_handlers_status
from nodeagent.version import NODEAGENT_VERSION, VERSION_ANNOTATION

# The kubelet leaves attach/detach to the controller manager by default and says so on its Node.
CONTROLLER_MANAGED_ATTACH_DETACH = "volumes.kubernetes.io/controller-managed-attach-detach"
# The annotations the agent owns on its Node: put back at every registration, so a restarted (or upgraded) agent
# keeps them true.
OWNED_ANNOTATIONS: tuple[str, ...] = (CONTROLLER_MANAGED_ATTACH_DETACH, VERSION_ANNOTATION)


def pod_capacity(config: KubeletConfiguration, cpu_count: int) -> int:
    """The node's pod capacity: maxPods, or podsPerCore times the CPUs when that is set and smaller (upstream's
    MachineInfo setter)."""
    if config.pods_per_core > 0:
        return min(config.max_pods, config.pods_per_core * cpu_count)
    return config.max_pods


def build_node_status(
    facts: NodeFacts,
    config: KubeletConfiguration,
    conditions: Sequence[Mapping[str, Any]],
    *,
    hugepages: Mapping[str, int] | None = None,
    runtime_handlers: Sequence[RuntimeHandler] = (),
    runtime_features: RuntimeFeatures | None = None,
    device_capacity: tuple[Mapping[str, int], Mapping[str, int]] | None = None,
) -> dict[str, Any]:
    """Node.status: capacity, allocatable, conditions, addresses, daemon endpoints, node info, and the runtime's
    handlers and features when it reports them (CRI Status).

    `device_capacity` is the device plugins' (capacity, allocatable) per extended resource (the device manager's
    GetCapacity), set over the machine's as upstream's MachineInfo setter does.

    kubeProxyVersion is left out: it is deprecated and the kubelet no longer fills it.
    """
    node_capacity = capacity(
        facts.cpu_count,
        facts.memory_bytes,
        facts.ephemeral_storage_bytes,
        pod_capacity(config, facts.cpu_count),
        hugepages,
    )
    addresses = []
    if facts.internal_ip:
        addresses.append({"type": "InternalIP", "address": facts.internal_ip})
    addresses.append({"type": "Hostname", "address": facts.hostname})
    node_allocatable = allocatable(node_capacity, config.system_reserved, config.kube_reserved, config.eviction_hard)
    if device_capacity is not None:
        node_capacity = dict(sorted({**node_capacity, **{k: str(v) for k, v in device_capacity[0].items()}}.items()))
        node_allocatable = dict(
            sorted({**node_allocatable, **{k: str(v) for k, v in device_capacity[1].items()}}.items())
        )
    status: dict[str, Any] = {
        "capacity": node_capacity,
        "allocatable": node_allocatable,
        "conditions": [dict(c) for c in conditions],
        "addresses": addresses,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": facts.daemon_port}},
        "nodeInfo": {
            "machineID": facts.machine_id,
            "systemUUID": facts.system_uuid,
            "bootID": facts.boot_id,
            "kernelVersion": facts.kernel_version,
            "osImage": facts.os_image,
            "containerRuntimeVersion": facts.container_runtime_version,
            "kubeletVersion": facts.kubelet_version,
            "operatingSystem": facts.operating_system,
            "architecture": facts.architecture,
        },
    }
    if runtime_handlers:
        status["runtimeHandlers"] = runtime_handlers_status(runtime_handlers)
    features = node_features_status(runtime_features)
    if features is not None:
        status["features"] = features
    return status


def initial_node(
    node_name: str,
    facts: NodeFacts,
    config: KubeletConfiguration,
    *,
    conditions: Sequence[Mapping[str, Any]] = (),
    hugepages: Mapping[str, int] | None = None,
    runtime_handlers: Sequence[RuntimeHandler] = (),
    runtime_features: RuntimeFeatures | None = None,
    extra_labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The Node to create at registration: labels (the well-known ones, then the kubelet's --node-labels over them, as
    upstream's initialNode), registerWithTaints, spec.podCIDR and providerID when set, and
    the annotations we own (attach/detach by the controller, nodeagent's own version)."""
    spec: dict[str, Any] = {}
    if config.pod_cidr:
        spec["podCIDR"] = config.pod_cidr
        spec["podCIDRs"] = [config.pod_cidr]
    if config.provider_id:
        spec["providerID"] = config.provider_id
    if config.register_with_taints:
        taints = []
        for taint in config.register_with_taints:
            entry = {"key": taint.key, "effect": str(taint.effect)}
            if taint.value:
                entry["value"] = taint.value
            taints.append(entry)
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node_name,
            "labels": {
                **node_labels(node_name, facts.operating_system, facts.architecture, hostname=facts.hostname),
                **(extra_labels or {}),
            },
            "annotations": {CONTROLLER_MANAGED_ATTACH_DETACH: "true", VERSION_ANNOTATION: NODEAGENT_VERSION},
        },
        "spec": spec,
        "status": build_node_status(
            facts,
            config,
            conditions,
            hugepages=hugepages,
            runtime_handlers=runtime_handlers,
            runtime_features=runtime_features,
        ),
    }
