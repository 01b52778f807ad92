"""The plugin manager's storage state: "CSINode is not yet initialized" until the node's CSINode is made."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from nodeagent.pluginmanager.manager import CSINODE_NOT_INITIALIZED, PluginManager, StorageState
from tests.unit.kube.scripted import Script, status

CSINODES = "/apis/storage.k8s.io/v1/csinodes"
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "uid-1"}}


async def test_the_storage_state_clears_only_once_the_csinode_is_made(tmp_path: Path) -> None:
    states: list[StorageState] = []
    at_create: list[str | None] = []

    def created(request: httpx.Request) -> httpx.Response:
        at_create.append(states[0].error())
        return httpx.Response(201, json=json.loads(request.content))

    script = (
        Script()
        .add("GET", CSINODES + "/n1", status(404, "NotFound"))
        .add("GET", "/api/v1/nodes/n1", httpx.Response(200, json=NODE))
        .add("POST", CSINODES, status(500, "InternalError", "etcd timeout"))  # retried
        .add("GET", CSINODES + "/n1", status(404, "NotFound"))
        .add("GET", "/api/v1/nodes/n1", httpx.Response(200, json=NODE))
        .add("POST", CSINODES, created)
    )
    async with script.client() as client:
        manager = PluginManager(str(tmp_path), client, "n1")
        states.append(manager.storage)
        assert manager.storage.error() == CSINODE_NOT_INITIALIZED
        await manager.ensure_csinode()
    assert at_create == [CSINODE_NOT_INITIALIZED]  # still an error until the CSINode is made
    assert manager.storage.error() is None
