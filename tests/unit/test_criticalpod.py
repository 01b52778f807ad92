"""Critical pods as upstream's pkg/kubelet/types: IsCriticalPod, IsNodeCriticalPod, Preemptable."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.criticalpod import is_critical_pod, is_node_critical_pod, preemptable


def pod(priority: int | None = None, klass: str = "", *, source: str = "api", mirror: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"priorityClassName": klass} if klass else {}
    if priority is not None:
        spec["priority"] = priority
    annotations = {"kubernetes.io/config.source": source}
    if mirror:
        annotations["kubernetes.io/config.mirror"] = "abc"
    return {"metadata": {"annotations": annotations}, "spec": spec}


@pytest.mark.parametrize(
    ("p", "critical", "node_critical"),
    [
        (pod(), False, False),
        (pod(1_999_999_999), False, False),
        (pod(2_000_000_000, "system-cluster-critical"), True, False),
        (pod(2_000_001_000, "system-node-critical"), True, True),
        (pod(0, "system-node-critical"), False, False),  # the name alone is not enough
        (pod(source="file"), True, False),  # static
        (pod(klass="system-node-critical", source="file"), True, True),
        (pod(mirror=True), True, False),  # mirror
    ],
)
def test_critical(p: dict[str, Any], critical: bool, node_critical: bool) -> None:
    assert (is_critical_pod(p), is_node_critical_pod(p)) == (critical, node_critical)


@pytest.mark.parametrize(
    ("preemptor", "preemptee", "expected"),
    [
        (pod(2_000_000_000), pod(1_000_000), True),  # critical over non-critical
        (pod(2_000_000_000), pod(), True),  # ... even without a priority
        (pod(2_000_001_000), pod(2_000_000_000), True),  # both critical: the higher priority
        (pod(2_000_000_000), pod(2_000_000_000), False),
        (pod(2_000_000_000), pod(source="file"), False),  # static, no priority
        (pod(20), pod(10), True),
        (pod(10), pod(10), False),
        (pod(), pod(10), False),
        (pod(10), pod(), False),
    ],
)
def test_preemptable(preemptor: dict[str, Any], preemptee: dict[str, Any], expected: bool) -> None:
    assert preemptable(preemptor, preemptee) is expected
