from __future__ import annotations

from typing import Any

import pytest

from nodeagent.kuberuntime.qos import QOSClass, compute_pod_qos, pod_qos


def res(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if requests is not None:
        out["requests"] = requests
    if limits is not None:
        out["limits"] = limits
    return {"name": "c", "resources": out}


FULL = {"cpu": "1", "memory": "1Gi"}


@pytest.mark.parametrize(
    ("containers", "init", "expected"),
    [
        ([{"name": "c"}], [], QOSClass.BEST_EFFORT),
        ([res(limits=FULL)], [], QOSClass.GUARANTEED),  # requests default to limits
        ([res(requests={"cpu": "1000m", "memory": "1024Mi"}, limits=FULL)], [], QOSClass.GUARANTEED),
        ([res(requests={"cpu": "500m"}, limits=FULL)], [], QOSClass.BURSTABLE),
        ([res(limits={"cpu": "1"})], [], QOSClass.BURSTABLE),
        ([res(requests={"memory": "1Gi"})], [], QOSClass.BURSTABLE),
        ([res(limits=FULL), {"name": "d"}], [], QOSClass.BURSTABLE),
        ([res(limits=FULL)], [{"name": "i"}], QOSClass.BURSTABLE),  # init containers count
        ([{"name": "c"}], [res(requests={"cpu": "100m"})], QOSClass.BURSTABLE),
        ([res(requests={"cpu": "0", "memory": "0"})], [], QOSClass.BEST_EFFORT),  # zero is unset
        ([res(requests={"ephemeral-storage": "1Gi"})], [], QOSClass.BEST_EFFORT),  # only cpu and memory count
    ],
)
def test_compute_pod_qos(containers: list[dict[str, Any]], init: list[dict[str, Any]], expected: QOSClass) -> None:
    assert compute_pod_qos({"spec": {"containers": containers, "initContainers": init}}) is expected


def test_pod_qos_trusts_status() -> None:
    pod = {"spec": {"containers": [{"name": "c"}]}, "status": {"qosClass": "Guaranteed"}}
    assert pod_qos(pod) is QOSClass.GUARANTEED
    assert pod_qos({"spec": {"containers": [{"name": "c"}]}, "status": {}}) is QOSClass.BEST_EFFORT
