"""GeneralPredicates on the kubelet side: upstream reasons and messages, first failure wins."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from nodeagent.admission import AdmitResult, admit, pod_requests


def node(
    *,
    cpu: str = "1",
    memory: str = "1Gi",
    storage: str = "10Gi",
    pods: str = "110",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "ephemeral-storage": storage, "pods": pods, **(extra or {})}
    return {
        "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1", **(labels or {})}},
        "spec": {"taints": taints or []},
        "status": {"allocatable": allocatable},
    }


def container(name: str = "c", *, ports: list[dict[str, Any]] | None = None, **requests: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": "img"}
    if requests:
        body["resources"] = {"requests": {k.replace("_", "-"): v for k, v in requests.items()}}
    if ports:
        body["ports"] = ports
    return body


def pod(
    *containers: dict[str, Any], uid: str = "u", init: list[dict[str, Any]] | None = None, **spec: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": uid, "namespace": "default", "uid": uid},
        "spec": {
            "nodeName": "n1",
            "containers": list(containers) or [container()],
            "initContainers": init or [],
            **spec,
        },
    }


def failed(reason: str, message: str) -> AdmitResult:
    return AdmitResult(admit=False, reason=reason, message=message)


OK = AdmitResult(admit=True)
AFFINITY = failed("NodeAffinity", "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector")


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


CASES: list[tuple[str, dict[str, Any], dict[str, Any], list[dict[str, Any]], AdmitResult]] = [
    ("empty pod fits", pod(), node(), [], OK),
    ("cpu fits exactly", pod(container(cpu="900m")), node(), [pod(container(cpu="100m"), uid="o")], OK),
    (
        "cpu over",
        pod(container(cpu="2")),
        node(),
        [pod(container(cpu="100m"), uid="o")],
        failed("OutOfcpu", "Node didn't have enough resource: cpu, requested: 2000, used: 100, capacity: 1000"),
    ),
    (
        "memory over",
        pod(container(memory="1Gi")),
        node(),
        [pod(container(memory="1Mi"), uid="o")],
        failed(
            "OutOfmemory",
            "Node didn't have enough resource: memory, requested: 1073741824, used: 1048576, capacity: 1073741824",
        ),
    ),
    (
        "ephemeral storage over",
        pod(container(ephemeral_storage="11Gi")),
        node(),
        [],
        failed(
            "OutOfephemeral-storage",
            "Node didn't have enough resource: ephemeral-storage, requested: 11811160064, used: 0, "
            "capacity: 10737418240",
        ),
    ),
    (
        "pods full",
        pod(),
        node(pods="2"),
        [pod(uid="a"), pod(uid="b")],
        failed("OutOfpods", "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"),
    ),
    ("terminal pods do not count", pod(), node(pods="1"), [{**pod(uid="a"), "status": {"phase": "Succeeded"}}], OK),
    ("the pod itself does not count", pod(uid="me"), node(pods="1"), [pod(uid="me")], OK),
    (
        "pods checked before cpu",
        pod(container(cpu="5")),
        node(pods="0"),
        [],
        failed("OutOfpods", "Node didn't have enough resource: pods, requested: 1, used: 0, capacity: 0"),
    ),
    (
        "init container max, not sum",
        pod(container(cpu="500m"), init=[container("i1", cpu="1"), container("i2", cpu="1")]),
        node(),
        [],
        OK,
    ),
    (
        "init container larger than the node",
        pod(container(cpu="500m"), init=[container("i1", cpu="1500m")]),
        node(),
        [],
        failed("OutOfcpu", "Node didn't have enough resource: cpu, requested: 1500, used: 0, capacity: 1000"),
    ),
    (
        "sidecar adds to app containers",
        pod(container(cpu="600m"), init=[{**container("s", cpu="500m"), "restartPolicy": "Always"}]),
        node(),
        [],
        failed("OutOfcpu", "Node didn't have enough resource: cpu, requested: 1100, used: 0, capacity: 1000"),
    ),
    (
        "overhead counts",
        pod(container(cpu="900m"), overhead={"cpu": "200m"}),
        node(),
        [],
        failed("OutOfcpu", "Node didn't have enough resource: cpu, requested: 1100, used: 0, capacity: 1000"),
    ),
    (
        "extended resource the node lacks is ignored",
        pod({**container(), "resources": {"requests": {"example.com/gpu": "1"}}}),
        node(),
        [],
        OK,
    ),
    (
        "extended resource over",
        pod({**container(), "resources": {"requests": {"example.com/gpu": "2"}}}),
        node(extra={"example.com/gpu": "1"}),
        [],
        failed(
            "OutOfexample.com/gpu",
            "Node didn't have enough resource: example.com/gpu, requested: 2, used: 0, capacity: 1",
        ),
    ),
    (
        "wrong node name",
        pod(nodeName="n2"),
        node(),
        [],
        failed("NodeName", "Predicate NodeName failed: node(s) didn't match the requested node name"),
    ),
    ("node selector matches", pod(nodeSelector={"disk": "ssd"}), node(labels={"disk": "ssd"}), [], OK),
    ("node selector does not match", pod(nodeSelector={"disk": "ssd"}), node(labels={"disk": "hdd"}), [], AFFINITY),
    (
        "affinity: one of the terms matches",
        pod(
            affinity=affinity(
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
            )
        ),
        node(labels={"zone": "b"}),
        [],
        OK,
    ),
    (
        "affinity: expressions in a term all hold",
        pod(
            affinity=affinity(
                {
                    "matchExpressions": [
                        {"key": "zone", "operator": "NotIn", "values": ["a"]},
                        {"key": "gpu", "operator": "Exists"},
                    ]
                }
            )
        ),
        node(labels={"zone": "b"}),
        [],
        AFFINITY,
    ),
    (
        "affinity: Gt and DoesNotExist",
        pod(
            affinity=affinity(
                {
                    "matchExpressions": [
                        {"key": "cores", "operator": "Gt", "values": ["4"]},
                        {"key": "spot", "operator": "DoesNotExist"},
                    ]
                }
            )
        ),
        node(labels={"cores": "8"}),
        [],
        OK,
    ),
    (
        "affinity: Lt fails",
        pod(affinity=affinity({"matchExpressions": [{"key": "cores", "operator": "Lt", "values": ["4"]}]})),
        node(labels={"cores": "8"}),
        [],
        AFFINITY,
    ),
    (
        "affinity: matchFields on the node name",
        pod(affinity=affinity({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]})),
        node(),
        [],
        OK,
    ),
    ("affinity: an empty term matches nothing", pod(affinity=affinity({})), node(), [], AFFINITY),
    (
        "host port conflict",
        pod(container(ports=[{"containerPort": 80, "hostPort": 8080}])),
        node(),
        [pod(container(ports=[{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}]), uid="o")],
        failed("NodePorts", "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"),
    ),
    (
        "host port on another protocol",
        pod(container(ports=[{"containerPort": 53, "hostPort": 53, "protocol": "UDP"}])),
        node(),
        [pod(container(ports=[{"containerPort": 53, "hostPort": 53}]), uid="o")],
        OK,
    ),
    (
        "host port on distinct IPs",
        pod(container(ports=[{"containerPort": 80, "hostPort": 80, "hostIP": "10.0.0.1"}])),
        node(),
        [pod(container(ports=[{"containerPort": 80, "hostPort": 80, "hostIP": "10.0.0.2"}]), uid="o")],
        OK,
    ),
    (
        "host port on a wildcard IP conflicts with a specific one",
        pod(container(ports=[{"containerPort": 80, "hostPort": 80}])),
        node(),
        [pod(container(ports=[{"containerPort": 80, "hostPort": 80, "hostIP": "10.0.0.2"}]), uid="o")],
        failed("NodePorts", "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"),
    ),
    (
        "container ports without host ports never conflict",
        pod(container(ports=[{"containerPort": 80}])),
        node(),
        [pod(container(ports=[{"containerPort": 80}]), uid="o")],
        OK,
    ),
    (
        "untolerated NoExecute taint",
        pod(),
        node(taints=[{"key": "k", "value": "v", "effect": "NoExecute"}]),
        [],
        failed("TaintToleration", "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"),
    ),
    (
        "NoSchedule taints are the scheduler's business",
        pod(),
        node(taints=[{"key": "k", "effect": "NoSchedule"}]),
        [],
        OK,
    ),
    (
        "tolerated by Equal",
        pod(tolerations=[{"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute"}]),
        node(taints=[{"key": "k", "value": "v", "effect": "NoExecute"}]),
        [],
        OK,
    ),
    (
        "Equal with another value does not tolerate",
        pod(tolerations=[{"key": "k", "value": "w"}]),
        node(taints=[{"key": "k", "value": "v", "effect": "NoExecute"}]),
        [],
        failed("TaintToleration", "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"),
    ),
    (
        "tolerate everything",
        pod(tolerations=[{"operator": "Exists"}]),
        node(taints=[{"key": "k", "value": "v", "effect": "NoExecute"}]),
        [],
        OK,
    ),
    (
        "static pods ignore taints",
        {**pod(), "metadata": {"uid": "s", "annotations": {"kubernetes.io/config.source": "file"}}},
        node(taints=[{"key": "k", "effect": "NoExecute"}]),
        [],
        OK,
    ),
    (
        "resources reported before affinity",
        pod(container(cpu="3"), nodeSelector={"x": "y"}),
        node(),
        [],
        failed("OutOfcpu", "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 1000"),
    ),
    (
        "pod OS field",
        pod(os={"name": "windows"}),
        node(),
        [],
        failed("PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS"),
    ),
    (
        "pod OS label",
        {**pod(), "metadata": {"uid": "w", "labels": {"kubernetes.io/os": "windows"}}},
        node(),
        [],
        failed(
            "PodOSSelectorNodeLabelDoesNotMatch",
            "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
        ),
    ),
]


@pytest.mark.parametrize(
    ("the_pod", "the_node", "others", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_admit(
    the_pod: dict[str, Any], the_node: dict[str, Any], others: list[dict[str, Any]], expected: AdmitResult
) -> None:
    assert admit(the_pod, the_node, others) == expected


def test_pod_requests_with_sidecars_before_an_init_container() -> None:
    # sidecar s (1) starts, then init i (2) runs next to it: peak 3; app (1) + sidecar (1) = 2 afterwards.
    the_pod = pod(
        container(cpu="1"),
        init=[{**container("s", cpu="1"), "restartPolicy": "Always"}, container("i", cpu="2")],
    )
    assert pod_requests(the_pod)["cpu"] == Decimal(3)
