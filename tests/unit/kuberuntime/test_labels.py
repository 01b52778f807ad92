from __future__ import annotations

from typing import Any

import pytest

from cri.v1 import api_pb2
from nodeagent.kuberuntime import labels as kl
from nodeagent.kuberuntime.errors import LabelsError

POD: dict[str, Any] = {
    "metadata": {
        "name": "web",
        "namespace": "default",
        "uid": "u-1",
        "labels": {"app": "web", kl.POD_NAME_LABEL: "spoofed"},
        "annotations": {"note": "x"},
    },
    "spec": {"terminationGracePeriodSeconds": 30},
}
CONTAINER: dict[str, Any] = {
    "name": "nginx",
    "image": "nginx",
    "ports": [{"containerPort": 80, "protocol": "TCP"}],
    "lifecycle": {"preStop": {"exec": {"command": ["sleep", "1"]}}},
}


def test_sandbox_labels_add_identity_over_pod_labels() -> None:
    assert kl.sandbox_labels(POD) == {
        "app": "web",
        kl.POD_NAME_LABEL: "web",
        kl.POD_NAMESPACE_LABEL: "default",
        kl.POD_UID_LABEL: "u-1",
    }
    assert kl.sandbox_annotations(POD) == {"note": "x"}


def test_container_labels_and_annotations() -> None:
    assert kl.container_labels(POD, CONTAINER) == {
        kl.POD_NAME_LABEL: "web",
        kl.POD_NAMESPACE_LABEL: "default",
        kl.POD_UID_LABEL: "u-1",
        kl.CONTAINER_NAME_LABEL: "nginx",
    }
    annotations = kl.container_annotations(POD, CONTAINER, container_hash="abc", restart_count=3)
    assert annotations == {
        kl.CONTAINER_HASH_ANNOTATION: "abc",
        kl.CONTAINER_RESTART_COUNT_ANNOTATION: "3",
        kl.TERMINATION_MESSAGE_PATH_ANNOTATION: "/dev/termination-log",
        kl.TERMINATION_MESSAGE_POLICY_ANNOTATION: "File",
        kl.POD_TERMINATION_GRACE_PERIOD_ANNOTATION: "30",
        kl.PRE_STOP_HANDLER_ANNOTATION: '{"exec":{"command":["sleep","1"]}}',
        kl.CONTAINER_PORTS_ANNOTATION: '[{"containerPort":80,"protocol":"TCP"}]',
    }


def test_ports_and_pre_stop_annotations_in_go_struct_field_order() -> None:
    """As upstream's json.Marshal of v1.ContainerPort / v1.LifecycleHandler (what `crictl inspect` shows for the
    kubelet's containers), not sorted keys."""
    container = {
        **CONTAINER,
        "ports": [{"protocol": "TCP", "hostPort": 8080, "containerPort": 80, "name": "http", "hostIP": "198.18.0.1"}],
        "lifecycle": {
            "preStop": {
                "httpGet": {
                    "scheme": "HTTP",
                    "port": 80,
                    "path": "/q",
                    "host": "h",
                    "httpHeaders": [{"value": "v", "name": "n"}],
                }
            }
        },
    }
    annotations = kl.container_annotations(POD, container, container_hash="abc", restart_count=0)
    assert annotations[kl.CONTAINER_PORTS_ANNOTATION] == (
        '[{"name":"http","hostPort":8080,"containerPort":80,"protocol":"TCP","hostIP":"198.18.0.1"}]'
    )
    assert annotations[kl.PRE_STOP_HANDLER_ANNOTATION] == (
        '{"httpGet":{"path":"/q","port":80,"host":"h","scheme":"HTTP","httpHeaders":[{"name":"n","value":"v"}]}}'
    )


def test_container_round_trip_through_cri_message() -> None:
    cri = api_pb2.Container(
        id="c1",
        labels=kl.container_labels(POD, CONTAINER),
        annotations=kl.container_annotations(POD, CONTAINER, container_hash="abc", restart_count=3),
    )
    info = kl.parse_container_labels(dict(cri.labels), dict(cri.annotations))
    assert info == kl.ContainerInfo(
        pod_name="web",
        pod_namespace="default",
        pod_uid="u-1",
        container_name="nginx",
        hash="abc",
        restart_count=3,
        termination_message_path="/dev/termination-log",
        termination_message_policy="File",
        pod_termination_grace_period=30,
        pre_stop_handler={"exec": {"command": ["sleep", "1"]}},
        ports=({"containerPort": 80, "protocol": "TCP"},),
    )


def test_sandbox_round_trip() -> None:
    info = kl.parse_sandbox_labels(kl.sandbox_labels(POD), kl.sandbox_annotations(POD))
    assert (info.pod_name, info.pod_namespace, info.pod_uid) == ("web", "default", "u-1")
    assert info.pod_labels == {"app": "web"}
    assert info.pod_annotations == {"note": "x"}


@pytest.mark.parametrize(
    ("annotations", "restart_count", "hash_", "grace"),
    [
        ({}, 0, "", None),
        ({kl.CONTAINER_RESTART_COUNT_ANNOTATION: "nope"}, 0, "", None),
        ({kl.CONTAINER_RESTART_COUNT_ANNOTATION: "7", kl.CONTAINER_HASH_ANNOTATION: "h"}, 7, "h", None),
        ({kl.POD_TERMINATION_GRACE_PERIOD_ANNOTATION: "x"}, 0, "", None),
        ({kl.PRE_STOP_HANDLER_ANNOTATION: "{not json"}, 0, "", None),
    ],
)
def test_parse_is_lenient_about_annotations(
    annotations: dict[str, str], restart_count: int, hash_: str, grace: int | None
) -> None:
    info = kl.parse_container_labels(kl.container_labels(POD, CONTAINER), annotations)
    assert (info.restart_count, info.hash, info.pod_termination_grace_period) == (restart_count, hash_, grace)
    assert info.pre_stop_handler is None


@pytest.mark.parametrize(
    "missing", [kl.POD_NAME_LABEL, kl.POD_NAMESPACE_LABEL, kl.POD_UID_LABEL, kl.CONTAINER_NAME_LABEL]
)
def test_parse_requires_identity(missing: str) -> None:
    labels = kl.container_labels(POD, CONTAINER)
    del labels[missing]
    with pytest.raises(LabelsError, match=missing):
        kl.parse_container_labels(labels, {})
