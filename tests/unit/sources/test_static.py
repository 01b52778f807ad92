"""decode_pod / decode_pod_list: a manifest's data becomes a defaulted, validated static pod (upstream: common.go)."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import pytest

from nodeagent.sources.static import (
    CONFIG_HASH_ANNOTATION,
    InvalidManifest,
    decode_pod,
    decode_pod_list,
    default_pull_policy,
    generate_pod_name,
    static_pod_uid,
)

Obj = dict[str, Any]

MANIFEST: Obj = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "labels": {"app": "web"}},
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "registry.local/busybox:1.35",
                "ports": [{"containerPort": 80}],
                "livenessProbe": {"httpGet": {"port": 80}},
            }
        ]
    },
}


def decode(
    obj: Any = None, *, node: str = "Node-1", source: str = "/etc/manifests/web.yaml", is_file: bool = True
) -> Obj:
    return decode_pod(copy.deepcopy(MANIFEST if obj is None else obj), node_name=node, source=source, is_file=is_file)


def test_defaults_as_upstream_apply_defaults() -> None:
    pod = decode()
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "web-node-1"  # -<node name>, lowercased
    assert meta["namespace"] == "default"
    assert len(meta["uid"]) == 32
    assert meta["annotations"] == {CONFIG_HASH_ANNOTATION: meta["uid"]}
    assert spec["nodeName"] == "Node-1"
    assert spec["tolerations"] == [{"operator": "Exists", "effect": "NoExecute"}]
    assert pod["status"] == {"phase": "Pending"}
    # The API defaults an apiserver would have applied.
    assert (spec["restartPolicy"], spec["dnsPolicy"], spec["terminationGracePeriodSeconds"]) == (
        "Always",
        "ClusterFirst",
        30,
    )
    assert (spec["schedulerName"], spec["securityContext"], spec["enableServiceLinks"]) == (
        "default-scheduler",
        {},
        True,
    )
    [container] = spec["containers"]
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert (container["terminationMessagePath"], container["terminationMessagePolicy"]) == (
        "/dev/termination-log",
        "File",
    )
    assert container["ports"] == [{"containerPort": 80, "protocol": "TCP"}]
    assert container["livenessProbe"] == {
        "httpGet": {"port": 80, "path": "/", "scheme": "HTTP"},
        "timeoutSeconds": 1,
        "periodSeconds": 10,
        "successThreshold": 1,
        "failureThreshold": 3,
    }


def test_the_uid_is_a_stable_hash_of_content_node_and_source() -> None:
    uid = decode()["metadata"]["uid"]
    assert decode()["metadata"]["uid"] == uid  # the same file read again (after a restart, say)
    edited = copy.deepcopy(MANIFEST)
    edited["spec"]["containers"][0]["image"] = "registry.local/busybox:1.36"
    assert decode(edited)["metadata"]["uid"] != uid
    assert decode(node="node-2")["metadata"]["uid"] != uid
    assert decode(source="/etc/manifests/other.yaml")["metadata"]["uid"] != uid
    assert static_pod_uid(MANIFEST, node_name="n", source="s") == static_pod_uid(
        dict(reversed(list(MANIFEST.items()))), node_name="n", source="s"
    )  # key order does not matter


def test_a_uid_in_the_manifest_is_kept() -> None:
    manifest = copy.deepcopy(MANIFEST)
    manifest["metadata"]["uid"] = "my-uid"
    pod = decode(manifest)
    assert pod["metadata"]["uid"] == "my-uid"
    assert pod["metadata"]["annotations"][CONFIG_HASH_ANNOTATION] == "my-uid"


def test_url_pods_get_no_toleration_and_server_fields_are_dropped() -> None:
    manifest = copy.deepcopy(MANIFEST)
    manifest["metadata"].update(
        namespace="kube-system", resourceVersion="7", deletionTimestamp="2026-01-01T00:00:00Z", creationTimestamp="x"
    )
    manifest["status"] = {"phase": "Succeeded"}
    pod = decode(manifest, is_file=False, source="http://h/pods")
    assert "tolerations" not in pod["spec"]
    assert pod["metadata"]["namespace"] == "kube-system"
    assert not {"resourceVersion", "deletionTimestamp", "creationTimestamp"} & set(pod["metadata"])
    assert pod["status"] == {"phase": "Pending"}


def test_an_existing_no_execute_toleration_is_not_doubled_and_host_network_defaults_host_ports() -> None:
    manifest = copy.deepcopy(MANIFEST)
    manifest["spec"]["tolerations"] = [
        {"operator": "Exists", "effect": "NoExecute"},
        {"key": "a", "operator": "Exists"},
    ]
    manifest["spec"]["hostNetwork"] = True
    pod = decode(manifest)
    assert pod["spec"]["tolerations"] == manifest["spec"]["tolerations"]
    assert pod["spec"]["containers"][0]["ports"][0]["hostPort"] == 80


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ("just a string", "couldn't parse as pod(a str, not an object)"),
        ({"apiVersion": "v1", "kind": "Service"}, "couldn't parse as pod(kind 'Service' of apiVersion 'v1' is not"),
        ({"apiVersion": "v1", "metadata": {"name": "x"}}, "couldn't parse as pod(Object 'Kind' is missing)"),
        ({"kind": "Pod", "metadata": {"name": "x"}}, "couldn't parse as pod(Object 'apiVersion' is missing)"),
        ({"apiVersion": "apps/v1", "kind": "Deployment"}, "is not a v1 Pod"),
        ({"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}}, "invalid pod: name is needed for the pod"),
        # a name of another type is refused before the node name is appended to it (which would make it a string)
        (
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": 123}, "spec": {"containers": []}},
            "invalid pod: [metadata.name: Invalid value: 123: must be a string]",
        ),
        (
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": True}, "spec": {"containers": []}},
            "invalid pod: [metadata.name: Invalid value: true: must be a string]",
        ),
        (
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "x"},
                "spec": {
                    "containers": [{"name": "c", "image": "i"}],
                    "ephemeralContainers": [{"name": "d", "image": "i"}],
                },
            },
            "invalid pod: [spec.ephemeralContainers: Forbidden: cannot be set on create]",
        ),
        ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}, "invalid pod: [spec: Required value]"),
        (
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"containers": [{"name": "c"}]}},
            "invalid pod: [spec.containers[0].image: Required value]",
        ),
        (
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "X_Y"}, "spec": {"containers": []}},
            'metadata.name: Invalid value: "X_Y-node-1"',
        ),
        (
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "x"},
                "spec": {"serviceAccountName": "default", "containers": [{"name": "c", "image": "i"}]},
            },
            "static pods may not reference serviceaccounts",
        ),
        (
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "x"},
                "spec": {"containers": [{"name": "c", "image": "i", "envFrom": [{"configMapRef": {"name": "c"}}]}]},
            },
            "static pods may not reference configmaps",
        ),
    ],
)
def test_unusable_manifests(obj: Any, message: str) -> None:
    with pytest.raises(InvalidManifest) as raised:
        decode(obj)
    assert message in str(raised.value)


def test_a_pod_list_decodes_item_by_item() -> None:
    good = {k: v for k, v in copy.deepcopy(MANIFEST).items() if k not in ("apiVersion", "kind")}
    other = copy.deepcopy(good)
    other["metadata"]["name"] = "other"
    bad = {"metadata": {"name": "bad"}, "spec": {"containers": [{"name": "c"}]}}
    items = decode_pod_list(
        {"apiVersion": "v1", "kind": "PodList", "items": [good, bad, other, "junk"]}, node_name="n", source="http://h"
    )
    assert [i["metadata"]["name"] if isinstance(i, dict) else type(i).__name__ for i in items] == [
        "web-n",
        "InvalidManifest",
        "other-n",
        "NotAPod",
    ]
    assert "spec.containers[0].image: Required value" in str(items[1])
    assert decode_pod_list({"apiVersion": "v1", "kind": "PodList"}, node_name="n", source="u") == []
    with pytest.raises(InvalidManifest, match="items must be a list"):
        decode_pod_list({"apiVersion": "v1", "kind": "PodList", "items": {}}, node_name="n", source="u")
    with pytest.raises(InvalidManifest, match="couldn't parse as a pod list"):
        decode_pod_list(MANIFEST, node_name="n", source="u")


@pytest.mark.parametrize(
    ("image", "policy"),
    [("busybox", "Always"), ("busybox:latest", "Always"), ("busybox:1.35", "IfNotPresent"), ("reg:5000/b", "Always"),
     ("reg:5000/b:1", "IfNotPresent"), ("b@sha256:abc", "IfNotPresent")],
)  # fmt: skip
def test_default_pull_policy(image: str, policy: str) -> None:
    assert default_pull_policy(image) == policy


def test_generate_pod_name() -> None:
    assert generate_pod_name("static-pod1", "NODE1") == "static-pod1-node1"


JUNK: list[Any] = [None, "", "x", -1, 0, 70000, 1.5, True, [], {}, [None], {"": None}, ["a", 1], {"name": 3}]


def _mutations(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(obj, dict):
        for key, value in obj.items():
            out += _mutations(value, (*path, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            out += _mutations(value, (*path, i))
    return out


def _replace(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    out = copy.deepcopy(obj)
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


RICH: Obj = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "namespace": "ns", "labels": {"a": "b"}, "annotations": {"c": "d"}},
    "spec": {
        "hostNetwork": False,
        "volumes": [
            {"name": "v", "hostPath": {"path": "/"}},
            {"name": "p", "projected": {"sources": [{"downwardAPI": {}}]}},
        ],
        "initContainers": [
            {"name": "i", "image": "i:1", "restartPolicy": "Always", "readinessProbe": {"exec": {"command": ["x"]}}}
        ],
        "containers": [
            {
                "name": "c",
                "image": "i:1",
                "ports": [{"containerPort": 80, "name": "http"}],
                "env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
                "envFrom": [{"prefix": "P"}],
                "volumeMounts": [{"name": "v", "mountPath": "/v"}],
                "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}},
                "livenessProbe": {"httpGet": {"port": "http"}},
                "lifecycle": {"preStop": {"sleep": {"seconds": 1}}},
            }
        ],
        "tolerations": [{"operator": "Exists"}],
        "imagePullSecrets": [],
    },
}


@pytest.mark.parametrize("junk", JUNK, ids=repr)
def test_any_field_of_any_type_gives_a_pod_or_invalid_manifest_never_another_error(junk: Any) -> None:
    """Every field of a rich manifest replaced in turn by each kind of junk: decoding never fails otherwise."""
    decode(RICH)  # the unmutated manifest is valid
    for path in _mutations(RICH):
        mutated = _replace(RICH, path, junk)
        with contextlib.suppress(InvalidManifest):
            decode(mutated)
        with contextlib.suppress(InvalidManifest):
            decode_pod_list(
                {"apiVersion": "v1", "kind": "PodList", "items": [mutated, junk]}, node_name="n", source="u"
            )


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("metadata", {"name": "x", "annotations": ["a"]}, r'metadata.annotations: Invalid value: \["a"\]: must be an'),
        (
            "spec",
            {"tolerations": "all", "containers": [{"name": "c", "image": "i"}]},
            'spec.tolerations: Invalid value: "all": must be a list',
        ),
    ],
)
def test_fields_the_defaults_extend_must_have_their_type(field: str, value: Any, message: str) -> None:
    manifest = copy.deepcopy(MANIFEST)
    manifest[field] = value
    with pytest.raises(InvalidManifest, match=message):
        decode(manifest)
