"""Requests are data: each verb's path, query, body and content type, checked without a transport."""

from __future__ import annotations

import pytest

from nodeagent.kube import paths
from nodeagent.kube.request import (
    ApiRequest,
    PatchBody,
    PatchType,
    create_request,
    delete_request,
    list_request,
    patch_request,
    watch_request,
)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (paths.pods(), "/api/v1/pods"),
        (paths.pods("kube-system"), "/api/v1/namespaces/kube-system/pods"),
        (paths.pod("default", "web-0"), "/api/v1/namespaces/default/pods/web-0"),
        (paths.pod_status("default", "web-0"), "/api/v1/namespaces/default/pods/web-0/status"),
        (paths.nodes(), "/api/v1/nodes"),
        (paths.node("worker-1"), "/api/v1/nodes/worker-1"),
        (paths.node_status("worker-1"), "/api/v1/nodes/worker-1/status"),
        (paths.leases("kube-node-lease"), "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"),
        (
            paths.lease("kube-node-lease", "worker-1"),
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/worker-1",
        ),
        (paths.events("default"), "/api/v1/namespaces/default/events"),
        (paths.event("default", "web-0.17a"), "/api/v1/namespaces/default/events/web-0.17a"),
        (paths.namespace("ns"), "/api/v1/namespaces/ns"),
        (paths.configmap("ns", "cm"), "/api/v1/namespaces/ns/configmaps/cm"),
        (paths.secret("ns", "s"), "/api/v1/namespaces/ns/secrets/s"),
        (paths.api_path("csidrivers", group="storage.k8s.io", name="d"), "/apis/storage.k8s.io/v1/csidrivers/d"),
        # A name is one path segment, whatever it holds.
        (paths.node("a/b"), "/api/v1/nodes/a%2Fb"),
    ],
)
def test_paths(path: str, expected: str) -> None:
    assert path == expected


@pytest.mark.parametrize(
    "call",
    [
        lambda: paths.pod("", "x"),
        lambda: paths.node(""),
        lambda: paths.api_path("pods", subresource="status"),
    ],
)
def test_bad_paths_are_refused(call: object) -> None:
    with pytest.raises(ValueError):
        call()  # type: ignore[operator]


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (list_request("/api/v1/pods"), ApiRequest("GET", "/api/v1/pods")),
        (
            list_request(
                "/api/v1/pods", field_selector="spec.nodeName=n", label_selector="a=b", resource_version="0", limit=2
            ),
            ApiRequest(
                "GET",
                "/api/v1/pods",
                (
                    ("labelSelector", "a=b"),
                    ("fieldSelector", "spec.nodeName=n"),
                    ("resourceVersion", "0"),
                    ("limit", "2"),
                ),
            ),
        ),
        # With a continue token the resourceVersion is left out: the apiserver refuses both.
        (
            list_request("/api/v1/pods", resource_version="0", limit=2, continue_token="tok"),
            ApiRequest("GET", "/api/v1/pods", (("limit", "2"), ("continue", "tok"))),
        ),
        (
            watch_request("/api/v1/pods", resource_version="42", field_selector="spec.nodeName=n", timeout_seconds=300),
            ApiRequest(
                "GET",
                "/api/v1/pods",
                (
                    ("watch", "true"),
                    ("resourceVersion", "42"),
                    ("fieldSelector", "spec.nodeName=n"),
                    ("timeoutSeconds", "300"),
                    ("allowWatchBookmarks", "true"),
                ),
            ),
        ),
        (
            watch_request("/api/v1/pods", resource_version="42", allow_bookmarks=False),
            ApiRequest("GET", "/api/v1/pods", (("watch", "true"), ("resourceVersion", "42"))),
        ),
        (
            create_request("/api/v1/nodes", {"kind": "Node"}, field_manager="nodeagent"),
            ApiRequest("POST", "/api/v1/nodes", (("fieldManager", "nodeagent"),), {"kind": "Node"}, "application/json"),
        ),
        (delete_request("/api/v1/nodes/n"), ApiRequest("DELETE", "/api/v1/nodes/n")),
        (
            delete_request(
                "/api/v1/namespaces/d/pods/p",
                grace_period_seconds=0,
                preconditions_uid="u-1",
                propagation_policy="Background",
            ),
            ApiRequest(
                "DELETE",
                "/api/v1/namespaces/d/pods/p",
                (),
                {
                    "kind": "DeleteOptions",
                    "apiVersion": "v1",
                    "gracePeriodSeconds": 0,
                    "preconditions": {"uid": "u-1"},
                    "propagationPolicy": "Background",
                },
                "application/json",
            ),
        ),
    ],
)
def test_requests(request_: ApiRequest, expected: ApiRequest) -> None:
    assert request_ == expected


@pytest.mark.parametrize(
    ("patch_type", "body", "content_type"),
    [
        ("strategic", {"status": {"phase": "Running"}}, "application/strategic-merge-patch+json"),
        ("merge", {"metadata": {"labels": {"a": None}}}, "application/merge-patch+json"),
        ("json", [{"op": "replace", "path": "/data/k", "value": "v"}], "application/json-patch+json"),
        ("apply", {"apiVersion": "v1", "kind": "ConfigMap"}, "application/apply-patch+yaml"),
    ],
)
def test_patch_content_types(patch_type: PatchType, body: PatchBody, content_type: str) -> None:
    request = patch_request(
        "/api/v1/nodes/n", body, patch_type=patch_type, field_manager="nodeagent", subresource="status"
    )
    assert request.method == "PATCH"
    assert request.path == "/api/v1/nodes/n/status"
    assert request.content_type == content_type
    assert request.body == body
    assert request.params == (("fieldManager", "nodeagent"),)


def test_apply_patch_with_force() -> None:
    request = patch_request("/p", {"kind": "X"}, patch_type="apply", field_manager="m", force=True)
    assert request.params == (("fieldManager", "m"), ("force", "true"))


@pytest.mark.parametrize(
    ("patch_type", "body", "kwargs"),
    [
        ("apply", {"kind": "X"}, {}),  # apply needs a field manager
        ("json", {"op": "add"}, {}),  # a JSON patch is a list
        ("merge", [{"op": "add"}], {}),
        ("strategic", {}, {"force": True}),
        ("yaml", {}, {}),
    ],
)
def test_bad_patches_are_refused(patch_type: str, body: PatchBody, kwargs: dict[str, bool]) -> None:
    with pytest.raises(ValueError):
        patch_request("/p", body, patch_type=patch_type, **kwargs)  # type: ignore[arg-type]
