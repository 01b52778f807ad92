"""Pod-level resources (spec.resources, PodLevelResources) in the one pod-requests/limits helper and at admission, as
upstream's resourcehelper.PodRequests / PodLimits and the kubelet's resources fit count them."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from nodeagent.admission import AdmitResult, admit
from nodeagent.admission.resources import (
    is_pod_level_limits_set,
    is_pod_level_requests_set,
    is_pod_level_resources_set,
    pod_level_requests,
    pod_limits,
    pod_requests,
    resource_request,
)

MI = 1024 * 1024


def the_pod(
    resources: dict[str, Any] | None,
    *containers: dict[str, Any],
    init: list[dict[str, Any]] | None = None,
    overhead: dict[str, str] | None = None,
    uid: str = "u",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeName": "n1",
        "containers": list(containers) or [{"name": "c", "image": "img"}],
        "initContainers": init or [],
    }
    if resources is not None:
        spec["resources"] = resources
    if overhead is not None:
        spec["overhead"] = overhead
    return {"metadata": {"name": uid, "namespace": "default", "uid": uid}, "spec": spec}


def ctr(name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, "image": "img", "resources": {"requests": requests or {}, "limits": limits or {}}}


@pytest.mark.parametrize(
    ("resources", "requests_set", "limits_set"),
    [
        (None, False, False),
        ({}, False, False),
        ({"requests": {"cpu": "1"}}, True, False),
        ({"limits": {"memory": "1Gi"}}, False, True),
        ({"limits": {"hugepages-2Mi": "4Mi"}}, False, True),
        # Only cpu, memory and hugepages-* are pod-level resources upstream (IsSupportedPodLevelResource).
        ({"requests": {"example.com/widget": "1"}, "limits": {"ephemeral-storage": "1Gi"}}, False, False),
    ],
)
def test_is_pod_level_set(resources: dict[str, Any] | None, requests_set: bool, limits_set: bool) -> None:
    pod = the_pod(resources)
    assert is_pod_level_requests_set(pod) is requests_set
    assert is_pod_level_limits_set(pod) is limits_set
    assert is_pod_level_resources_set(pod) is (requests_set or limits_set)


def test_pod_level_requests_replace_the_containers_sum_for_what_they_name() -> None:
    pod = the_pod(
        {"requests": {"cpu": "500m"}},
        ctr("a", {"cpu": "100m", "memory": "16Mi", "ephemeral-storage": "1Gi"}),
        ctr("b", {"cpu": "100m", "memory": "16Mi"}),
        overhead={"cpu": "50m", "memory": "8Mi"},
    )
    requests = pod_requests(pod)
    # cpu: the pod-level 500m plus the overhead; memory and ephemeral-storage: the containers' sum plus overhead.
    assert requests["cpu"] == Decimal("0.55")
    assert requests["memory"] == 40 * MI
    assert requests["ephemeral-storage"] == 1024 * MI
    assert pod_requests(pod, overhead=False)["cpu"] == Decimal("0.5")
    assert pod_requests(pod, pod_level=False, overhead=False)["cpu"] == Decimal("0.2")


def test_pod_level_request_defaults_to_its_limit() -> None:
    # API defaulting (SetDefaults_Pod): an unset pod-level request is its limit; static pods reach us undefaulted.
    pod = the_pod({"requests": {"cpu": "200m"}, "limits": {"cpu": "1", "memory": "128Mi"}})
    assert pod_level_requests(pod) == {"cpu": Decimal("0.2"), "memory": 128 * MI}
    assert pod_requests(pod) == {"cpu": Decimal("0.2"), "memory": 128 * MI}


def test_pod_limits_with_pod_level_limits_and_overhead() -> None:
    pod = the_pod(
        {"requests": {"cpu": "200m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}},
        ctr("a", limits={"ephemeral-storage": "2Gi"}),
        ctr("b"),
        overhead={"cpu": "100m", "memory": "16Mi", "ephemeral-storage": "1Gi"},
    )
    assert pod_limits(pod, overhead=False) == {"cpu": Decimal(1), "memory": 256 * MI, "ephemeral-storage": 2048 * MI}
    assert pod_limits(pod) == {"cpu": Decimal("1.1"), "memory": 272 * MI, "ephemeral-storage": 3072 * MI}
    # Without pod-level resources (SkipPodLevelResources) the containers' limits alone: no cpu or memory limit.
    assert pod_limits(pod, pod_level=False, overhead=False) == {"ephemeral-storage": 2048 * MI}


def test_overhead_goes_only_to_limits_that_are_set() -> None:
    pod = the_pod(None, ctr("a", limits={"cpu": "1"}), overhead={"cpu": "100m", "memory": "16Mi"})
    assert pod_limits(pod) == {"cpu": Decimal("1.1")}


NODE: dict[str, Any] = {
    "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
    "spec": {},
    "status": {"allocatable": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "10Gi", "pods": "110"}},
}


def test_admission_counts_the_pod_level_request() -> None:
    # Containers ask 100m; the pod-level request of 1500m is what does not fit, as upstream's noderesources fit.
    pod = the_pod({"requests": {"cpu": "1500m"}}, ctr("a", {"cpu": "100m"}))
    assert admit(pod, NODE, []) == AdmitResult(
        admit=False,
        reason="OutOfcpu",
        message="Node didn't have enough resource: cpu, requested: 1500, used: 0, capacity: 1000",
    )


def test_admission_counts_other_pods_pod_level_requests() -> None:
    other = the_pod({"requests": {"memory": "900Mi"}}, ctr("a", {"memory": "1Mi"}), uid="other")
    pod = the_pod(None, ctr("b", {"memory": "200Mi"}))
    result = admit(pod, NODE, [other])
    assert result.reason == "OutOfmemory"
    assert f"used: {900 * MI}" in result.message
    # Without the other pod's pod-level request (its containers' 1Mi only) it would fit.
    assert admit(pod, NODE, [the_pod(None, ctr("a", {"memory": "1Mi"}), uid="other")]) == AdmitResult(admit=True)


def test_pod_level_hugepages_count_at_admission() -> None:
    # A pod-level hugepages limit is its request too; a node without hugepages cannot hold it.
    pod = the_pod({"limits": {"hugepages-2Mi": "4Mi"}})
    assert admit(pod, NODE, []) == AdmitResult(
        admit=False,
        reason="OutOfhugepages-2Mi",
        message=f"Node didn't have enough resource: hugepages-2Mi, requested: {4 * MI}, used: 0, capacity: 0",
    )
    node = {**NODE, "status": {"allocatable": {**NODE["status"]["allocatable"], "hugepages-2Mi": "8Mi"}}}
    assert admit(pod, node, []) == AdmitResult(admit=True)


@pytest.mark.parametrize(
    ("resources", "name", "expected"),
    [
        # No pod-level resources: the containers' aggregate, plus the overhead.
        (None, "memory", Decimal(48 * MI)),
        (None, "ephemeral-storage", Decimal(1024 * MI + 512 * MI)),
        # Pod-level resources set: the pod-level request alone, plus the overhead.
        ({"requests": {"memory": "100Mi"}}, "memory", Decimal(108 * MI)),
        # ... a resource they do not name counts zero, the containers' requests are not read (and no overhead).
        ({"requests": {"cpu": "1"}}, "memory", Decimal(0)),
        ({"requests": {"memory": "100Mi"}}, "ephemeral-storage", Decimal(0)),
        # A pod-level limit alone is the request (API defaulting).
        ({"limits": {"memory": "200Mi"}}, "memory", Decimal(208 * MI)),
    ],
)
def test_resource_request_for_eviction_and_preemption(
    resources: dict[str, Any] | None, name: str, expected: Decimal
) -> None:
    pod = the_pod(
        resources,
        ctr("a", {"memory": "40Mi", "ephemeral-storage": "1Gi"}),
        overhead={"memory": "8Mi", "ephemeral-storage": "512Mi"},
    )
    assert resource_request(pod, name) == expected
