"""The node's CSI facts as upstream's nodeinfomanager writes them: the pure decisions, then the writes on the wire."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from nodeagent.pluginmanager.nodeinfo import (
    ANNOTATION_KEY_NODE_ID,
    DriverNodeInfo,
    NodeInfoError,
    NodeInfoManager,
    install_patch,
    installed_drivers,
    new_csinode,
    retry_with_backoff,
    uninstall_patch,
    uninstalled_drivers,
)
from tests.unit.kube.scripted import Script, status


def node(annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "n1", "uid": "uid-1", "annotations": annotations or {}, "labels": labels or {}}}


@pytest.mark.parametrize(
    ("case", "annotations", "labels", "topology", "expected"),
    [
        (
            "first driver",
            {},
            {},
            {},
            {"metadata": {"annotations": {ANNOTATION_KEY_NODE_ID: '{"d.csi":"id-1"}'}}},
        ),
        (
            "added to the map, keys sorted",
            {ANNOTATION_KEY_NODE_ID: '{"z.csi":"z"}'},
            {},
            {},
            {"metadata": {"annotations": {ANNOTATION_KEY_NODE_ID: '{"d.csi":"id-1","z.csi":"z"}'}}},
        ),
        ("already recorded: nothing", {ANNOTATION_KEY_NODE_ID: '{"d.csi":"id-1"}'}, {}, {}, None),
        (
            "topology labels",
            {ANNOTATION_KEY_NODE_ID: '{"d.csi":"id-1"}'},
            {"other": "x"},
            {"topology.d.csi/zone": "a"},
            {"metadata": {"labels": {"topology.d.csi/zone": "a"}}},
        ),
        (
            "topology already there",
            {ANNOTATION_KEY_NODE_ID: '{"d.csi":"id-1"}'},
            {"topology.d.csi/zone": "a"},
            {"topology.d.csi/zone": "a"},
            None,
        ),
    ],
)
def test_install_patch(
    case: str, annotations: dict[str, str], labels: dict[str, str], topology: dict[str, str], expected: object
) -> None:
    del case
    assert install_patch(node(annotations, labels), "d.csi", "id-1", topology) == expected


@pytest.mark.parametrize(
    ("labels", "annotation", "message"),
    [
        (
            {"topology.d.csi/zone": "b"},
            "",
            'detected topology value collision: driver reported "topology.d.csi/zone":"a" but existing label is '
            '"topology.d.csi/zone":"b"',
        ),
        ({}, "not json", f'failed to parse node\'s "{ANNOTATION_KEY_NODE_ID}" annotation value ("not json")'),
    ],
)
def test_install_patch_refusals(labels: dict[str, str], annotation: str, message: str) -> None:
    annotations = {ANNOTATION_KEY_NODE_ID: annotation} if annotation else {}
    with pytest.raises(NodeInfoError) as raised:
        install_patch(node(annotations, labels), "d.csi", "id-1", {"topology.d.csi/zone": "a"})
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        ('{"d.csi":"id-1"}', {"metadata": {"annotations": {ANNOTATION_KEY_NODE_ID: None}}}),
        ('{"d.csi":"id-1","z.csi":"z"}', {"metadata": {"annotations": {ANNOTATION_KEY_NODE_ID: '{"z.csi":"z"}'}}}),
        ('{"z.csi":"z"}', None),
        ("", None),
    ],
)
def test_uninstall_patch(annotation: str, expected: object) -> None:
    annotations = {ANNOTATION_KEY_NODE_ID: annotation} if annotation else {}
    assert uninstall_patch(node(annotations), "d.csi") == expected


INFO = DriverNodeInfo("id-1", 7, {"topology.d.csi/zone": "a", "topology.d.csi/rack": "r"})


@pytest.mark.parametrize(
    ("case", "drivers", "info", "expected"),
    [
        (
            "first driver",
            [],
            INFO,
            [
                {
                    "name": "d.csi",
                    "nodeID": "id-1",
                    "topologyKeys": ["topology.d.csi/rack", "topology.d.csi/zone"],
                    "allocatable": {"count": 7},
                }
            ],
        ),
        (
            "no limit, no allocatable",
            [{"name": "o.csi", "nodeID": "o"}],
            DriverNodeInfo("id-1", 0, {}),
            [{"name": "o.csi", "nodeID": "o"}, {"name": "d.csi", "nodeID": "id-1", "topologyKeys": []}],
        ),
        (
            "same entry: nothing",
            [
                {
                    "name": "d.csi",
                    "nodeID": "id-1",
                    "topologyKeys": ["topology.d.csi/zone", "topology.d.csi/rack"],
                    "allocatable": {"count": 7},
                }
            ],
            INFO,
            None,
        ),
        (
            "a new node ID replaces the entry, which goes last",
            [{"name": "d.csi", "nodeID": "old"}, {"name": "o.csi", "nodeID": "o"}],
            DriverNodeInfo("id-1", 0, {}),
            [{"name": "o.csi", "nodeID": "o"}, {"name": "d.csi", "nodeID": "id-1", "topologyKeys": []}],
        ),
        (
            "a limit above int32 is truncated",
            [],
            DriverNodeInfo("id-1", 2**40, {}),
            [{"name": "d.csi", "nodeID": "id-1", "topologyKeys": [], "allocatable": {"count": 2**31 - 1}}],
        ),
    ],
)
def test_installed_drivers(case: str, drivers: list[Any], info: DriverNodeInfo, expected: object) -> None:
    del case
    assert installed_drivers({"spec": {"drivers": drivers}}, "d.csi", info) == expected


def test_uninstalled_drivers() -> None:
    csinode = {"spec": {"drivers": [{"name": "d.csi"}, {"name": "o.csi"}]}}
    assert uninstalled_drivers(csinode, "d.csi") == [{"name": "o.csi"}]
    assert uninstalled_drivers(csinode, "x.csi") is None


def test_new_csinode_is_owned_by_the_node() -> None:
    assert new_csinode(node()) == {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {
            "name": "n1",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-1"}],
        },
        "spec": {"drivers": []},
    }


async def test_retry_with_backoff_tries_four_times_with_upstreams_delays() -> None:
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    async def fail() -> None:
        raise NodeInfoError("no")

    errors = await retry_with_backoff(fail, sleep=sleep)
    assert [str(e) for e in errors] == ["no"] * 4
    assert delays == pytest.approx([0.01, 0.05, 0.25])


NODE = "/api/v1/nodes/n1"
CSINODES = "/apis/storage.k8s.io/v1/csinodes"


def _json(request: httpx.Request) -> Any:
    return json.loads(request.content)


async def test_install_writes_annotation_labels_and_creates_the_csinode() -> None:
    created: dict[str, Any] = {}

    def create(request: httpx.Request) -> httpx.Response:
        created.update(_json(request))
        return httpx.Response(201, json={**created, "metadata": {**created["metadata"], "resourceVersion": "5"}})

    script = (
        Script()
        .add("GET", NODE, httpx.Response(200, json=node()))
        .add("PATCH", NODE + "/status", httpx.Response(200, json=node()))
        .add("GET", CSINODES + "/n1", status(404, "NotFound"))
        .add("GET", NODE, httpx.Response(200, json=node()))
        .add("POST", CSINODES, create)
        .add("PUT", CSINODES + "/n1", lambda r: httpx.Response(200, json=_json(r)))
    )
    async with script.client() as client:
        await NodeInfoManager(client, "n1").install_driver("d.csi", DriverNodeInfo("id-1", 3, {"topo/zone": "a"}))
    patch = script.requests[1]
    assert patch.headers["content-type"] == "application/strategic-merge-patch+json"
    assert _json(patch) == {
        "metadata": {"annotations": {ANNOTATION_KEY_NODE_ID: '{"d.csi":"id-1"}'}, "labels": {"topo/zone": "a"}}
    }
    assert created["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    put = _json(script.requests[5])
    assert put["metadata"]["resourceVersion"] == "5"  # the update is conditional on what was read
    assert put["spec"]["drivers"] == [
        {"name": "d.csi", "nodeID": "id-1", "topologyKeys": ["topo/zone"], "allocatable": {"count": 3}}
    ]
    assert not script.steps


async def test_install_retries_a_conflicting_csinode_update() -> None:
    csinode = {"metadata": {"name": "n1", "resourceVersion": "7"}, "spec": {"drivers": []}}
    annotated = node({ANNOTATION_KEY_NODE_ID: '{"d.csi":"id-1"}'})
    script = (
        Script()
        .add("GET", NODE, httpx.Response(200, json=annotated))
        .add("GET", CSINODES + "/n1", httpx.Response(200, json=csinode))
        .add("PUT", CSINODES + "/n1", status(409, "Conflict", "the object has been modified"))
        .add("GET", CSINODES + "/n1", httpx.Response(200, json=csinode))
        .add("PUT", CSINODES + "/n1", lambda r: httpx.Response(200, json=_json(r)))
    )
    async with script.client() as client:
        await NodeInfoManager(client, "n1").install_driver("d.csi", DriverNodeInfo("id-1", 0, {}))
    assert not script.steps


async def test_uninstall_removes_the_entry_and_the_annotation_key() -> None:
    csinode = {"metadata": {"name": "n1", "resourceVersion": "7"}, "spec": {"drivers": [{"name": "d.csi"}]}}
    annotated = node({ANNOTATION_KEY_NODE_ID: '{"d.csi":"id-1"}'}, {"topo/zone": "a"})
    script = (
        Script()
        .add("GET", CSINODES + "/n1", httpx.Response(200, json=csinode))
        .add("PUT", CSINODES + "/n1", lambda r: httpx.Response(200, json=_json(r)))
        .add("GET", NODE, httpx.Response(200, json=annotated))
        .add("PATCH", NODE + "/status", httpx.Response(200, json=node()))
    )
    async with script.client() as client:
        await NodeInfoManager(client, "n1").uninstall_driver("d.csi")
    assert _json(script.requests[1])["spec"]["drivers"] == []
    # The key goes; the topology labels stay, as upstream.
    assert _json(script.requests[3]) == {"metadata": {"annotations": {ANNOTATION_KEY_NODE_ID: None}}}


async def test_an_empty_node_id_is_refused_before_any_write() -> None:
    async with Script().client() as client:
        with pytest.raises(NodeInfoError, match="driverNodeID must not be empty"):
            await NodeInfoManager(client, "n1").install_driver("d.csi", DriverNodeInfo("", 0, {}))
