"""The pod/claim helpers of the DRA manager against upstream's resourceclaim package (v0.34): tables."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.dra import claims

Obj = dict[str, Any]


def pod(claims_: list[Obj], statuses: list[Obj] | None = None, uid: str = "pod-uid") -> Obj:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": uid},
        "spec": {"resourceClaims": claims_},
        "status": {"resourceClaimStatuses": statuses} if statuses is not None else {},
    }


def claim(owner_uid: str | None = "pod-uid", *, namespace: str = "ns", controller: bool = True) -> Obj:
    refs = [{"uid": owner_uid, "controller": controller, "kind": "Pod", "name": "p"}] if owner_uid else []
    return {"metadata": {"name": "c", "namespace": namespace, "uid": "claim-uid", "ownerReferences": refs}}


@pytest.mark.parametrize(
    ("the_pod", "entry", "expected"),
    [
        pytest.param(
            pod([]), {"name": "a", "resourceClaimName": "shared"}, claims.ClaimName("shared", False), id="name"
        ),
        pytest.param(
            pod([], [{"name": "a", "resourceClaimName": "p-a-x"}]),
            {"name": "a", "resourceClaimTemplateName": "t"},
            claims.ClaimName("p-a-x", True),
            id="template-generated",
        ),
        pytest.param(
            pod([], [{"name": "a"}]),
            {"name": "a", "resourceClaimTemplateName": "t"},
            claims.ClaimName(None, True),
            id="template-no-claim-needed",
        ),
    ],
)
def test_claim_name(the_pod: Obj, entry: Obj, expected: claims.ClaimName) -> None:
    assert claims.claim_name(the_pod, entry) == expected


@pytest.mark.parametrize(
    ("the_pod", "entry", "message"),
    [
        pytest.param(
            pod([], []),
            {"name": "a", "resourceClaimTemplateName": "t"},
            'pod "ns/p": ResourceClaim not created yet',
            id="template-not-created",
        ),
        pytest.param(
            pod([]),
            {"name": "a"},
            'pod "ns/p", spec.resourceClaim "a": none of the supported fields are set',
            id="neither",
        ),
    ],
)
def test_claim_name_errors_are_upstreams(the_pod: Obj, entry: Obj, message: str) -> None:
    with pytest.raises(claims.ClaimError) as caught:
        claims.claim_name(the_pod, entry)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("the_claim", "ok"),
    [
        pytest.param(claim(), True, id="controlled-by-the-pod"),
        pytest.param(claim("other"), False, id="another-owner"),
        pytest.param(claim(controller=False), False, id="owner-not-controller"),
        pytest.param(claim(None), False, id="no-owner"),
        pytest.param(claim(namespace="elsewhere"), False, id="other-namespace"),
    ],
)
def test_is_for_pod(the_claim: Obj, ok: bool) -> None:
    if ok:
        claims.is_for_pod(pod([]), the_claim)
        return
    with pytest.raises(claims.ClaimError) as caught:
        claims.is_for_pod(pod([]), the_claim)
    namespace = the_claim["metadata"]["namespace"]
    assert str(caught.value) == f"ResourceClaim {namespace}/c was not created for pod ns/p (pod is not owner)"


def test_is_reserved_for_pod() -> None:
    reserved = {"status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-uid"}]}}
    assert claims.is_reserved_for_pod(pod([]), reserved)
    assert not claims.is_reserved_for_pod(pod([], uid="other"), reserved)
    assert not claims.is_reserved_for_pod(pod([]), {"status": {}})


def test_allocated_drivers_in_order_without_repeats() -> None:
    results = [{"driver": "b"}, {"driver": "a"}, {"driver": "b"}]
    assert claims.allocated_drivers({"status": {"allocation": {"devices": {"results": results}}}}) == ["b", "a"]
    assert claims.allocated_drivers({"status": {}}) is None


def test_container_claim_requests_follow_the_pod_claims() -> None:
    the_pod = pod(
        [{"name": "x", "resourceClaimName": "cx"}, {"name": "y", "resourceClaimTemplateName": "t"}],
        [{"name": "y", "resourceClaimName": "p-y"}],
    )
    container = {"resources": {"claims": [{"name": "y", "request": "r1"}, {"name": "x"}, {"name": "y"}]}}
    assert claims.container_claim_requests(the_pod, container) == [("cx", ""), ("p-y", "r1"), ("p-y", "")]
    assert claims.container_claim_requests(the_pod, {"name": "plain"}) == []


def test_container_claim_requests_resolve_every_pod_claim() -> None:
    # As upstream's GetResources: a pod claim without its generated claim fails every container, even one that
    # does not name it.
    the_pod = pod([{"name": "x", "resourceClaimName": "cx"}, {"name": "y", "resourceClaimTemplateName": "t"}], [])
    with pytest.raises(claims.ClaimError):
        claims.container_claim_requests(the_pod, {"resources": {"claims": [{"name": "x"}]}})
