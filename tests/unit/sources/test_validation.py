"""validate_pod (a ValidatePodCreate subset) and api_object_reference (static pods reference no API object)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodeagent.sources.validation import (
    api_object_reference,
    dns1123_label_error,
    dns1123_subdomain_error,
    iana_svc_name_error,
    qualified_name_error,
    validate_pod,
)

Pod = dict[str, Any]

VALID: Pod = {
    "metadata": {"name": "web-node1", "namespace": "default", "uid": "u1", "labels": {"app": "web"}},
    "spec": {
        "restartPolicy": "Always",
        "dnsPolicy": "ClusterFirst",
        "volumes": [{"name": "data", "hostPath": {"path": "/srv"}}, {"name": "tmp", "emptyDir": {}}],
        "initContainers": [{"name": "init", "image": "busybox:1.35", "command": ["true"]}],
        "containers": [
            {
                "name": "main",
                "image": "busybox:1.35",
                "command": ["sleep", "3600"],
                "ports": [{"name": "http", "containerPort": 8080, "hostPort": 8080, "protocol": "TCP"}],
                "env": [
                    {"name": "A_B.c-d", "value": "1"},
                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "x"}}},
                ],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "resources": {"requests": {"cpu": "100m", "memory": 1024}, "limits": {"cpu": 1}},
                "livenessProbe": {"httpGet": {"port": "http", "path": "/"}, "periodSeconds": 10},
                "readinessProbe": {"tcpSocket": {"port": 8080}, "successThreshold": 3},
                "startupProbe": {"exec": {"command": ["true"]}},
                "lifecycle": {"preStop": {"sleep": {"seconds": 1}}},
            }
        ],
    },
}


def with_change(path: str, value: Any) -> Pod:
    """VALID with one field replaced: path is dotted, list indices are numbers; value None deletes the field."""
    pod = copy.deepcopy(VALID)
    *parents, last = path.split(".")
    node: Any = pod
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is None:
        del node[int(last) if last.isdigit() else last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return pod


def test_the_valid_pod_is_valid() -> None:
    assert validate_pod(VALID) == []


@pytest.mark.parametrize(
    ("path", "value", "error"),
    [
        ("metadata.name", None, "metadata.name: Required value"),
        ("metadata.name", "Web_1", 'metadata.name: Invalid value: "Web_1": a lowercase RFC 1123 subdomain'),
        ("metadata.name", "a" * 254, "metadata.name: Invalid value"),
        ("metadata.name", 123, "metadata.name: Invalid value: 123: must be a string"),
        ("metadata.namespace", "kube.system", 'metadata.namespace: Invalid value: "kube.system"'),
        ("metadata.labels", {"app": "has space"}, "metadata.labels[app]: Invalid value"),
        ("metadata.labels", {"-bad": "x"}, 'metadata.labels: Invalid value: "-bad"'),
        ("metadata.labels", {"app": 3}, "metadata.labels[app]: Invalid value: 3: must be a string"),
        ("metadata.annotations", {"a": "x" * (256 * 1024)}, "metadata.annotations: Too long"),
        ("metadata.annotations", {"example.com/": "x"}, "name part must be non-empty"),
        ("spec.containers", [], "spec.containers: Required value"),
        ("spec.containers", "main", 'spec.containers: Invalid value: "main": must be a list'),
        # only the API's ephemeralcontainers subresource adds them (upstream ValidatePodCreate)
        (
            "spec.ephemeralContainers",
            [{"name": "debug", "image": "busybox:1.35"}],
            "spec.ephemeralContainers: Forbidden: cannot be set on create",
        ),
        ("spec.containers.0.name", "init", 'spec.containers[0].name: Duplicate value: "init"'),
        ("spec.containers.0.name", None, "spec.containers[0].name: Required value"),
        ("spec.containers.0.name", "Main", 'spec.containers[0].name: Invalid value: "Main"'),
        ("spec.containers.0.image", "", "spec.containers[0].image: Required value"),
        ("spec.containers.0.image", " busybox", "must not have leading or trailing whitespace"),
        ("spec.containers.0.imagePullPolicy", "Sometimes", 'imagePullPolicy: Unsupported value: "Sometimes"'),
        (
            "spec.containers.0.command",
            ["sleep", 1],
            "spec.containers[0].command[1]: Invalid value: 1: must be a string",
        ),
        ("spec.containers.0.ports.0.containerPort", 0, "containerPort: Invalid value: 0: must be between 1 and 65535"),
        ("spec.containers.0.ports.0.containerPort", None, "spec.containers[0].ports[0].containerPort: Required value"),
        ("spec.containers.0.ports.0.hostPort", 70000, "hostPort: Invalid value: 70000"),
        ("spec.containers.0.ports.0.protocol", "ICMP", 'protocol: Unsupported value: "ICMP"'),
        ("spec.containers.0.ports.0.name", "http--x", "must not contain consecutive hyphens"),
        ("spec.containers.0.ports.0.hostIP", "not-an-ip", "must be a valid IP address"),
        ("spec.containers.0.env.0.name", "1abc", "a valid environment variable name"),
        ("spec.containers.0.env.1.valueFrom", {}, "must specify exactly one of"),
        ("spec.containers.0.volumeMounts.0.name", "nope", 'volumeMounts[0].name: Not found: "nope"'),
        ("spec.containers.0.volumeMounts.0.mountPath", "", "volumeMounts[0].mountPath: Required value"),
        (
            "spec.containers.0.resources",
            {"requests": {"cpu": "lots"}},
            'resources.requests[cpu]: Invalid value: "lots"',
        ),
        ("spec.containers.0.resources", {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}, "less than or equal"),
        (
            "spec.containers.0.livenessProbe",
            {"periodSeconds": 10},
            "livenessProbe: Required value: must specify a handler",
        ),
        (
            "spec.containers.0.livenessProbe",
            {"exec": {"command": ["true"]}, "tcpSocket": {"port": 1}},
            "livenessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type",
        ),
        ("spec.containers.0.livenessProbe", {"exec": {"command": ["true"]}, "successThreshold": 2}, "must be 1"),
        ("spec.containers.0.startupProbe", {"grpc": {"port": 0}}, "startupProbe.grpc.port: Invalid value: 0"),
        ("spec.containers.0.readinessProbe", {"httpGet": {"port": "HTTP"}}, 'httpGet.port: Invalid value: "HTTP"'),
        ("spec.containers.0.readinessProbe", {"tcpSocket": {"port": 1}, "periodSeconds": -1}, "periodSeconds"),
        ("spec.containers.0.lifecycle", {"preStop": {}}, "lifecycle.preStop: Required value: must specify a handler"),
        ("spec.containers.0.restartPolicy", "Always", "containers[0].restartPolicy: Forbidden"),
        ("spec.initContainers.0.restartPolicy", "Never", 'initContainers[0].restartPolicy: Unsupported value: "Never"'),
        (
            "spec.initContainers.0.readinessProbe",
            {"exec": {"command": ["true"]}},
            "initContainers[0].readinessProbe: Forbidden",
        ),
        ("spec.volumes.1.name", "data", 'spec.volumes[1].name: Duplicate value: "data"'),
        ("spec.volumes.1", {"name": "tmp"}, "spec.volumes[1]: Required value: must specify a volume type"),
        ("spec.volumes.1", {"name": "tmp", "emptyDir": {}, "hostPath": {"path": "/"}}, "more than 1 volume type"),
        ("spec.volumes.1", {"name": "tmp", "madeUp": {}}, "spec.volumes[1].madeUp: Forbidden: unknown volume type"),
        ("spec.volumes.0.hostPath", {}, "spec.volumes[0].hostPath.path: Required value"),
        ("spec.restartPolicy", "Sometimes", 'spec.restartPolicy: Unsupported value: "Sometimes"'),
        ("spec.dnsPolicy", "Cluster", 'spec.dnsPolicy: Unsupported value: "Cluster"'),
        ("spec.dnsPolicy", "None", "spec.dnsConfig: Required value"),
        ("spec.terminationGracePeriodSeconds", -1, "spec.terminationGracePeriodSeconds: Invalid value: -1"),
        (
            "spec.terminationGracePeriodSeconds",
            "30",
            'terminationGracePeriodSeconds: Invalid value: "30": must be an integer',
        ),
        ("spec.activeDeadlineSeconds", 0, "spec.activeDeadlineSeconds: Invalid value: 0"),
        ("spec.hostNetwork", "yes", 'spec.hostNetwork: Invalid value: "yes": must be a boolean'),
        ("spec.nodeSelector", ["x"], "spec.nodeSelector: Invalid value"),
    ],
)
def test_invalid_pods(path: str, value: Any, error: str) -> None:
    errors = validate_pod(with_change(path, value))
    assert any(error in e for e in errors), errors


def test_host_network_ports_must_match() -> None:
    pod = with_change("spec.hostNetwork", True)
    pod["spec"]["containers"][0]["ports"][0]["hostPort"] = 9090
    assert any("must match `containerPort` when `hostNetwork` is true" in e for e in validate_pod(pod))


@pytest.mark.parametrize("junk", [None, "pod", 3, [1], {"metadata": "x", "spec": []}])
def test_junk_never_raises(junk: Any) -> None:
    assert validate_pod(junk if isinstance(junk, dict) else {"metadata": junk, "spec": junk})


@pytest.mark.parametrize(
    ("check", "value", "ok"),
    [
        (dns1123_label_error, "a-1", True),
        (dns1123_label_error, "a.b", False),
        (dns1123_label_error, "-a", False),
        (dns1123_label_error, "a" * 64, False),
        (dns1123_subdomain_error, "a.b-c.d", True),
        (dns1123_subdomain_error, "A", False),
        (qualified_name_error, "example.com/app_Name.1", True),
        (qualified_name_error, "Example.com/app", False),
        (qualified_name_error, "/app", False),
        (qualified_name_error, "a" * 64, False),
        (iana_svc_name_error, "http-2", True),
        (iana_svc_name_error, "8080", False),
        (iana_svc_name_error, "-http", False),
        (iana_svc_name_error, "a" * 16, False),
    ],
)
def test_name_rules(check: Any, value: str, ok: bool) -> None:
    assert (check(value) is None) is ok


def _spec(**spec: Any) -> Pod:
    return {"spec": {"containers": [{"name": "c", "image": "i"}], **spec}}


def _container(**container: Any) -> Pod:
    return {"spec": {"containers": [{"name": "c", "image": "i", **container}]}}


def _volume(**source: Any) -> Pod:
    return _spec(volumes=[{"name": "v", **source}])


@pytest.mark.parametrize(
    ("pod", "resource"),
    [
        (_spec(), None),
        (_volume(hostPath={"path": "/"}), None),
        (_volume(emptyDir={}), None),
        (_volume(projected={"sources": [{"downwardAPI": {"items": []}}]}), None),
        (_spec(serviceAccountName="default"), "serviceaccounts"),
        (_spec(serviceAccount="default"), "serviceaccounts"),
        (_spec(imagePullSecrets=[{"name": "pull"}]), "secrets"),
        (_container(env=[{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]), "secrets"),
        (_container(envFrom=[{"secretRef": {"name": "s"}}]), "secrets"),
        (_volume(secret={"secretName": "s"}), "secrets"),
        (_volume(projected={"sources": [{"secret": {"name": "s"}}]}), "secrets"),
        (_volume(csi={"driver": "d", "nodePublishSecretRef": {"name": "s"}}), "secrets"),
        (_volume(azureFile={"secretName": "s", "shareName": "x"}), "secrets"),
        (_container(env=[{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]), "configmaps"),
        (_container(envFrom=[{"configMapRef": {"name": "c"}}]), "configmaps"),
        (_volume(configMap={"name": "c"}), "configmaps"),
        (_volume(projected={"sources": [{"configMap": {"name": "c"}}]}), "configmaps"),
        (_spec(resourceClaims=[{"name": "r"}]), "resourceclaims"),
        (_volume(persistentVolumeClaim={"claimName": "c"}), "persistentvolumeclaims"),
        (_volume(ephemeral={"volumeClaimTemplate": {}}), "persistentvolumeclaims (via ephemeral volumes)"),
        (_volume(csi={"driver": "d"}), "csidrivers (via CSI volumes)"),
        (_volume(glusterfs={"endpoints": "e", "path": "p"}), "endpoints (via glusterFS volumes)"),
        (
            _volume(projected={"sources": [{"serviceAccountToken": {"path": "t"}}]}),
            "serviceaccounts (via projected volumes)",
        ),
        (_volume(projected={"sources": [{"clusterTrustBundle": {"path": "t"}}]}), "clustertrustbundles"),
        (_spec(volumes="junk", containers=[{"env": 3}]), None),
    ],
)
def test_api_object_references(pod: Pod, resource: str | None) -> None:
    assert api_object_reference(pod) == resource
