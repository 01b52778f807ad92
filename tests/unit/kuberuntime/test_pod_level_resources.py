"""Pod-level resources (spec.resources, PodLevelResources, beta and on in v1.34) where the kubelet honours them: the
QoS class (ComputePodQOS), the pod cgroup (ResourceConfigForPod), the sandbox's resources (calculateSandboxResources),
a container's resources (getCPULimit / getMemoryLimit), the downward API's limit defaults
(defaultPodLimitsForDownwardAPI) and emptyDir's tmpfs size (calculateEmptyDirMemorySize)."""

from __future__ import annotations

from typing import Any

import pytest

from cri.v1 import api_pb2
from nodeagent.kuberuntime.cgroups import PodResourceConfig, pod_resource_config
from nodeagent.kuberuntime.container_config import make_environment, make_linux_resources
from nodeagent.kuberuntime.qos import QOSClass, compute_pod_qos
from nodeagent.kuberuntime.qos_cgroups import qos_cpu_shares
from nodeagent.kuberuntime.sandbox_config import sandbox_resources
from nodeagent.kuberuntime.swap import SwapSupport
from nodeagent.volume.downwardapi import collect_data
from nodeagent.volume.emptydir import tmpfs_size

MI = 1024 * 1024
GI = 1024 * MI


def ctr(name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "img", "resources": resources}


def pod(resources: dict[str, Any] | None, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": list(containers) or [ctr("c")], **spec}
    if resources is not None:
        body["resources"] = resources
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": body}


FULL = {"cpu": "500m", "memory": "128Mi"}


@pytest.mark.parametrize(
    ("resources", "containers", "expected"),
    [
        # Pod-level requests equal to pod-level limits: Guaranteed whatever the containers (none has a limit).
        ({"requests": FULL, "limits": FULL}, [ctr("a"), ctr("b", {"cpu": "100m"})], QOSClass.GUARANTEED),
        # Limits only: the requests default to them (API defaulting).
        ({"limits": FULL}, [ctr("a")], QOSClass.GUARANTEED),
        ({"requests": {"cpu": "250m", "memory": "128Mi"}, "limits": FULL}, [ctr("a")], QOSClass.BURSTABLE),
        # A pod-level memory limit alone is not enough for Guaranteed, even with containers that would be.
        ({"limits": {"memory": "128Mi"}}, [ctr("a", FULL, FULL)], QOSClass.BURSTABLE),
        ({"requests": {"cpu": "100m"}}, [ctr("a")], QOSClass.BURSTABLE),
        # A non-nil spec.resources decides alone: the containers' requests are not read (upstream ComputePodQOS).
        ({}, [ctr("a", FULL, FULL)], QOSClass.BEST_EFFORT),
        ({"requests": {"hugepages-2Mi": "2Mi"}}, [ctr("a", {"cpu": "1"})], QOSClass.BEST_EFFORT),
        (None, [ctr("a", FULL, FULL)], QOSClass.GUARANTEED),
    ],
)
def test_qos_from_pod_level_resources(
    resources: dict[str, Any] | None, containers: list[dict[str, Any]], expected: QOSClass
) -> None:
    assert compute_pod_qos(pod(resources, *containers)) is expected


@pytest.mark.parametrize(
    ("resources", "containers", "expected"),
    [
        # Burstable, containers without limits: quota and memory limit from the pod-level limits.
        (
            {"requests": {"cpu": "200m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}},
            [ctr("a"), ctr("b", {"cpu": "100m"})],
            PodResourceConfig(cpu_shares=204, cpu_quota=100000, cpu_period=100000, memory=256 * MI),
        ),
        # Guaranteed from the pod level alone.
        (
            {"limits": FULL},
            [ctr("a")],
            PodResourceConfig(cpu_shares=512, cpu_quota=50000, cpu_period=100000, memory=128 * MI),
        ),
        # A pod-level cpu limit only: no memory limit, as no container declares one.
        (
            {"requests": {"cpu": "100m"}, "limits": {"cpu": "300m"}},
            [ctr("a", {"memory": "16Mi"})],
            PodResourceConfig(cpu_shares=102, cpu_quota=30000, cpu_period=100000),
        ),
        # A pod-level request replaces the containers' sum for the shares.
        (
            {"requests": {"cpu": "1"}},
            [ctr("a", {"cpu": "100m"})],
            PodResourceConfig(cpu_shares=1024),
        ),
    ],
)
def test_pod_cgroup_from_pod_level_resources(
    resources: dict[str, Any], containers: list[dict[str, Any]], expected: PodResourceConfig
) -> None:
    assert pod_resource_config(pod(resources, *containers)) == expected


def test_sandbox_resources_from_pod_level_resources() -> None:
    the_pod = pod(
        {"requests": {"cpu": "200m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}},
        ctr("a", {"cpu": "50m"}),
        overhead={"cpu": "100m", "memory": "16Mi"},
    )
    assert sandbox_resources(the_pod) == api_pb2.LinuxContainerResources(
        cpu_shares=204, cpu_period=100000, cpu_quota=100000, memory_limit_in_bytes=256 * MI
    )


NO_SWAP = SwapSupport(cgroup_v2=False, controller=False)


def linux(the_pod: dict[str, Any], index: int = 0) -> api_pb2.LinuxContainerResources:
    container = the_pod["spec"]["containers"][index]
    return make_linux_resources(
        container,
        qos=compute_pod_qos(the_pod),
        memory_capacity=8 * GI,
        pod=the_pod,
        hugepage_sizes=(),
        swap=NO_SWAP,
    )


def test_container_without_limits_takes_the_pod_level_limits() -> None:
    the_pod = pod(
        {"requests": {"cpu": "200m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}},
        ctr("none"),
        ctr("requests", {"cpu": "100m", "memory": "32Mi"}),
        ctr("own", {"cpu": "100m"}, {"cpu": "300m", "memory": "64Mi"}),
    )
    none, requests, own = linux(the_pod, 0), linux(the_pod, 1), linux(the_pod, 2)
    # No cpu request: the shares come from the (pod-level) limit, as upstream's calculateLinuxResources.
    assert (none.cpu_shares, none.cpu_quota, none.memory_limit_in_bytes) == (1024, 100000, 256 * MI)
    assert (requests.cpu_shares, requests.cpu_quota, requests.memory_limit_in_bytes) == (102, 100000, 256 * MI)
    # A container's own limits win.
    assert (own.cpu_shares, own.cpu_quota, own.memory_limit_in_bytes) == (102, 30000, 64 * MI)


def test_container_without_pod_level_resources_is_unchanged() -> None:
    the_pod = pod(None, ctr("none"))
    out = linux(the_pod)
    assert (out.cpu_shares, out.cpu_quota, out.memory_limit_in_bytes) == (2, 0, 0)


ALLOCATABLE = {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "100Gi"}


def ref(resource: str) -> dict[str, Any]:
    return {"name": resource, "valueFrom": {"resourceFieldRef": {"resource": resource}}}


def test_downward_api_env_defaults_to_pod_level_limits() -> None:
    container = ctr("a")
    container["env"] = [ref("limits.cpu"), ref("limits.memory"), ref("limits.ephemeral-storage")]
    the_pod = pod({"limits": {"cpu": "1500m", "memory": "256Mi"}}, container)
    env = make_environment(
        the_pod,
        container,
        service_env={},
        node_name="n",
        host_ip="198.18.0.1",
        pod_ips=[],
        node_allocatable=ALLOCATABLE,
    )
    # cpu rounds up to whole cores (divisor 1); ephemeral-storage is not a pod-level resource: node allocatable.
    assert env == [("limits.cpu", "2"), ("limits.memory", str(256 * MI)), ("limits.ephemeral-storage", str(100 * GI))]


def test_downward_api_volume_defaults_to_pod_level_limits() -> None:
    the_pod = pod(
        {"requests": {"cpu": "1"}, "limits": {"memory": "256Mi"}}, ctr("a"), ctr("b", limits={"memory": "64Mi"})
    )
    items = [
        {"path": "a-mem", "resourceFieldRef": {"containerName": "a", "resource": "limits.memory"}},
        {"path": "a-cpu", "resourceFieldRef": {"containerName": "a", "resource": "limits.cpu"}},
        {"path": "b-mem", "resourceFieldRef": {"containerName": "b", "resource": "limits.memory"}},
    ]
    data = collect_data(items, the_pod, ALLOCATABLE, 0o644)
    assert {path: projection.data.decode() for path, projection in data.items()} == {
        "a-mem": str(256 * MI),
        "a-cpu": "4",  # no pod-level cpu limit: node allocatable
        "b-mem": str(64 * MI),
    }


def test_memory_emptydir_is_sized_by_the_pod_level_limit() -> None:
    volume = {"name": "v", "emptyDir": {"medium": "Memory"}}
    the_pod = pod({"limits": {"memory": "256Mi"}}, ctr("a"), volumes=[volume])
    assert tmpfs_size(the_pod, volume, 8 * GI) == 256 * MI
    assert tmpfs_size(pod(None, ctr("a"), volumes=[volume]), volume, 8 * GI) == 8 * GI


def test_burstable_tier_counts_the_pod_level_cpu_request() -> None:
    pods = [pod({"requests": {"cpu": "1"}}, ctr("a", {"cpu": "100m"})), pod(None, ctr("b", {"cpu": "500m"}))]
    assert qos_cpu_shares(pods)[QOSClass.BURSTABLE] == 1536
