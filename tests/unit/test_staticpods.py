"""Static pods in the kubelet: mirror pod decisions (pure), MirrorPods against a scripted apiserver, the start gate."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from nodeagent.kube.client import KubeClient
from nodeagent.staticpods import (
    MirrorActions,
    MirrorPods,
    StaticPodGate,
    build_mirror_pod,
    is_mirror_pod,
    is_mirror_pod_of,
    is_static_pod,
    mirror_actions,
    orphaned_mirror_pods,
)
from tests.unit.kube.scripted import Script, status

Pod = dict[str, Any]
NODE = {"metadata": {"name": "node-1", "uid": "node-uid"}}
PODS = "/api/v1/namespaces/default/pods"
POD = f"{PODS}/web-node-1"


def static(uid: str = "h1", name: str = "web-node-1") -> Pod:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": uid,
            "labels": {"app": "web"},
            "annotations": {
                "kubernetes.io/config.hash": uid,
                "kubernetes.io/config.source": "file",
                "kubernetes.io/config.seen": "t",
            },
        },
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Pending"},
    }


def mirror(of: str = "h1", uid: str = "m1", *, deleting: bool = False, name: str = "web-node-1") -> Pod:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "uid": uid,
        "annotations": {
            "kubernetes.io/config.mirror": of,
            "kubernetes.io/config.hash": of,
            "kubernetes.io/config.source": "api",
        },
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {}}


def api_pod(uid: str = "a1") -> Pod:
    return {"metadata": {"name": "api", "namespace": "default", "uid": uid,
                         "annotations": {"kubernetes.io/config.source": "api"}}}  # fmt: skip


def test_kinds_of_pods() -> None:
    assert is_static_pod(static()) and not is_mirror_pod(static())
    assert is_mirror_pod(mirror()) and not is_static_pod(mirror())
    assert not is_static_pod(api_pod()) and not is_mirror_pod(api_pod())
    assert not is_static_pod({"metadata": {}})  # a pod no source annotated yet


@pytest.mark.parametrize(
    ("mirror_pod", "expected"),
    [
        (None, MirrorActions(create=True)),
        (mirror("h1"), MirrorActions()),
        (mirror("h0", uid="old"), MirrorActions(delete_uid="old", create=True)),  # an older version of the pod
        (mirror("h1", deleting=True), MirrorActions(delete_uid="m1", create=True)),  # a user deleted it
    ],
)
def test_mirror_actions(mirror_pod: Pod | None, expected: MirrorActions) -> None:
    assert mirror_actions(static(), mirror_pod) == expected


def test_is_mirror_pod_of_needs_name_and_hash() -> None:
    assert is_mirror_pod_of(mirror("h1"), static("h1"))
    assert not is_mirror_pod_of(mirror("h1", name="other"), static("h1"))
    assert not is_mirror_pod_of(mirror("h2"), static("h1"))
    no_hash = static()
    del no_hash["metadata"]["annotations"]["kubernetes.io/config.hash"]
    assert not is_mirror_pod_of(mirror(""), no_hash)


def test_the_mirror_pod_is_what_node_restriction_allows() -> None:
    body = build_mirror_pod(static(), node_name="node-1", node_uid="node-uid")
    meta = body["metadata"]
    assert set(meta) == {"name", "namespace", "annotations", "ownerReferences", "labels"}  # no uid, no status
    assert meta["annotations"]["kubernetes.io/config.mirror"] == "h1"
    assert meta["annotations"]["kubernetes.io/config.hash"] == "h1"
    assert meta["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "node-uid", "controller": True}
    ]
    assert body["spec"]["nodeName"] == "node-1"
    assert "status" not in body


def test_orphaned_mirror_pods() -> None:
    pods = [static("h1"), mirror("h1"), mirror("h9", uid="m9", name="gone-node-1"), mirror("h8", uid="m8", name="busy")]
    orphans = orphaned_mirror_pods(pods, busy_full_names={"busy_default"})
    assert [p["metadata"]["uid"] for p in orphans] == ["m9"]


def test_the_gate_lets_one_pod_per_full_name_run() -> None:
    gate = StaticPodGate()
    alive = {"old"}
    old, new = static("old"), static("new")
    assert gate.allow_start(old, alive=alive.__contains__)
    assert not gate.allow_start(new, alive=alive.__contains__)  # the old one still terminates
    assert gate.allow_start(old, alive=alive.__contains__)
    gate.finished(old)
    alive = {"new"}
    assert gate.allow_start(new, alive=alive.__contains__)
    assert not gate.allow_start(old, alive=alive.__contains__)
    alive.clear()  # the new one's worker went away without finishing (housekeeping forgot it): no dead lock
    assert gate.allow_start(old, alive=alive.__contains__)
    assert gate.allow_start(static("other", name="other"), alive=alive.__contains__)


# --- MirrorPods against a scripted apiserver ----------------------------------------------------------------------


class World:
    def __init__(self) -> None:
        self.pods: list[Pod] = []
        self.node: dict[str, Any] | None = copy.deepcopy(NODE)

    def by_full_name(self, full_name: str) -> list[Pod]:
        return [p for p in self.pods if f"{p['metadata']['name']}_{p['metadata']['namespace']}" == full_name]

    def by_uid(self, uid: str) -> Pod | None:
        return next((p for p in self.pods if p["metadata"]["uid"] == uid), None)


@pytest.fixture
async def script() -> AsyncIterator[Script]:
    yield Script()


@pytest.fixture
async def client(script: Script) -> AsyncIterator[KubeClient]:
    async with script.client() as c:
        yield c


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def mirrors(client: KubeClient, world: World) -> MirrorPods:
    return MirrorPods(
        client,
        node_name="node-1",
        pods_by_full_name=world.by_full_name,
        pod_by_uid=world.by_uid,
        node=lambda: world.node,
    )


def created(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    body["metadata"]["uid"] = "m-new"
    return httpx.Response(201, json=body)


async def test_a_missing_mirror_is_created(script: Script, mirrors: MirrorPods, world: World) -> None:
    world.pods = [static()]
    script.add("POST", PODS, created)
    await mirrors.sync(static())
    body = json.loads(script.requests[0].content)
    assert body["metadata"]["annotations"]["kubernetes.io/config.mirror"] == "h1"
    assert body["metadata"]["ownerReferences"][0]["uid"] == "node-uid"
    assert mirrors.created == 1


async def test_a_deleted_or_stale_mirror_is_replaced(script: Script, mirrors: MirrorPods, world: World) -> None:
    world.pods = [static(), mirror("h1", deleting=True)]
    script.add("DELETE", POD, httpx.Response(200, json=mirror()))
    script.add("POST", PODS, created)
    await mirrors.sync(static())
    delete = json.loads(script.requests[0].content)
    assert delete["gracePeriodSeconds"] == 0
    assert delete["preconditions"] == {"uid": "m1"}
    assert (mirrors.deleted, mirrors.created) == (1, 1)


async def test_a_right_mirror_is_left_alone(script: Script, mirrors: MirrorPods, world: World) -> None:
    world.pods = [static(), mirror("h1")]
    await mirrors.sync(static())
    assert script.requests == []


async def test_no_node_no_mirror(script: Script, mirrors: MirrorPods, world: World) -> None:
    world.node = None
    await mirrors.sync(static())
    world.node = {"metadata": {"name": "node-1", "uid": "u", "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    await mirrors.sync(static())
    assert script.requests == []


async def test_already_exists_is_checked_and_api_errors_never_raise(
    script: Script, mirrors: MirrorPods, world: World
) -> None:
    world.pods = [static()]
    script.add("POST", PODS, status(409, "AlreadyExists"))
    script.add("GET", POD, httpx.Response(200, json=mirror("h1")))
    await mirrors.sync(static())  # made by an earlier sync whose watch event is still on its way: fine
    script.add("POST", PODS, status(403, "Forbidden", "node can only create mirror pods"))
    await mirrors.sync(static())  # logged, retried by the next sync
    script.add("POST", PODS, httpx.ConnectError("refused"))
    await mirrors.sync(static())
    assert mirrors.created == 0


async def test_orphans_are_deleted_and_a_vanished_one_is_fine(script: Script, mirrors: MirrorPods) -> None:
    script.add("DELETE", POD, status(404, "NotFound"))
    script.add("DELETE", "/api/v1/namespaces/default/pods/gone-node-1", httpx.Response(200, json={}))
    await mirrors.delete_orphans([mirror("h1"), mirror("h9", uid="m9", name="gone-node-1")], busy_full_names=set())
    assert mirrors.deleted == 1


def test_api_uid_translates_a_static_pod_to_its_current_mirror(mirrors: MirrorPods, world: World) -> None:
    world.pods = [static("h1"), api_pod("a1")]
    assert mirrors.api_uid("a1") == "a1"  # an API pod carries its own status
    assert mirrors.api_uid("h1") is None  # no mirror yet
    world.pods.append(mirror("h0", uid="old"))
    assert mirrors.api_uid("h1") is None  # a mirror of another version
    world.pods[-1] = mirror("h1", uid="m1", deleting=True)
    assert mirrors.api_uid("h1") is None  # being deleted
    world.pods[-1] = mirror("h1", uid="m1")
    assert mirrors.api_uid("h1") == "m1"
    assert mirrors.api_uid("unknown") is None
