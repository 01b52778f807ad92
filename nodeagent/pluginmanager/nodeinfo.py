"""The node's CSI facts in the API, as upstream's nodeinfomanager (pkg/volume/csi/nodeinfomanager).

On a driver's registration:
- the Node annotation `csi.volume.kubernetes.io/nodeid`, a JSON map driver name -> the driver's node ID;
- the driver's topology segments as Node labels (a segment that contradicts an existing label is an error);
- the CSINode object (storage.k8s.io/v1, named after the node and owned by it): one entry in spec.drivers with
  name, nodeID, topologyKeys (sorted) and allocatable.count from max_volumes_per_node (absent when 0).
On its deregistration the CSINode entry and the annotation key go; the labels stay (upstream leaves them too).

The decisions are pure functions over dicts; `NodeInfoManager` does the I/O with the agent's kube client, which
holds the node's own credential (system:node:NAME), so every write passes the Node authorizer and NodeRestriction:
a node may patch its own Node and create/update/delete the CSINode of its own name. Each write is retried with
upstream's updateBackoff (4 tries, 10 ms growing 5x), on a fresh read each time.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import KubeError, NotFound

log = logging.getLogger(__name__)

ANNOTATION_KEY_NODE_ID = "csi.volume.kubernetes.io/nodeid"
MAX_INT32 = 2**31 - 1

# Upstream's updateBackoff: Steps 4, Duration 10 ms, Factor 5 (jitter left out: one node, one writer).
UPDATE_BACKOFF_STEPS = 4
UPDATE_BACKOFF_FIRST = 0.01
UPDATE_BACKOFF_FACTOR = 5.0

Obj = dict[str, Any]


class NodeInfoError(Exception):
    """Upstream's texts; the handler passes them on to the driver's registration status."""


@dataclass(frozen=True)
class DriverNodeInfo:
    """What NodeGetInfo said."""

    node_id: str
    max_volumes_per_node: int
    topology: Mapping[str, str]


def _node_id_map(annotations: Mapping[str, str]) -> dict[str, str]:
    value = annotations.get(ANNOTATION_KEY_NODE_ID, "")
    if not value:
        return {}
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise NodeInfoError(
            f'failed to parse node\'s "{ANNOTATION_KEY_NODE_ID}" annotation value ("{value}") err={exc}'
        ) from exc
    if not isinstance(parsed, dict):
        raise NodeInfoError(f'failed to parse node\'s "{ANNOTATION_KEY_NODE_ID}" annotation value ("{value}")')
    return {str(key): str(val) for key, val in parsed.items()}


def _encode(ids: Mapping[str, str]) -> str:
    # Go's json.Marshal of a map: keys sorted, no spaces.
    return json.dumps(dict(sorted(ids.items())), separators=(",", ":"))


def install_patch(node: Obj, driver: str, node_id: str, topology: Mapping[str, str]) -> Obj | None:
    """The metadata patch that records a driver on the Node (annotation + topology labels); None when nothing
    changes. Raises NodeInfoError on an unreadable annotation or a topology label collision (upstream's texts)."""
    metadata = node.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    labels = metadata.get("labels") or {}
    patch: Obj = {}
    ids = _node_id_map(annotations)
    if ids.get(driver) != node_id:
        ids[driver] = node_id
        patch.setdefault("metadata", {})["annotations"] = {ANNOTATION_KEY_NODE_ID: _encode(ids)}
    for key, value in sorted(topology.items()):
        current = labels.get(key)
        if current is not None and current != value:
            raise NodeInfoError(
                f'detected topology value collision: driver reported "{key}":"{value}" but existing label is '
                f'"{key}":"{current}"'
            )
    new_labels = {key: value for key, value in sorted(topology.items()) if labels.get(key) != value}
    if new_labels:
        patch.setdefault("metadata", {})["labels"] = new_labels
    return patch or None


def uninstall_patch(node: Obj, driver: str) -> Obj | None:
    """The metadata patch that drops a driver's node ID (the whole annotation when it was the last); None when the
    annotation does not name it."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    ids = _node_id_map(annotations)
    if driver not in ids:
        return None
    del ids[driver]
    value: str | None = _encode(ids) if ids else None
    return {"metadata": {"annotations": {ANNOTATION_KEY_NODE_ID: value}}}


def new_csinode(node: Obj) -> Obj:
    """The CSINode of a node, with no drivers, owned by the Node (so it goes when the Node is deleted)."""
    metadata = node.get("metadata") or {}
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {
            "name": metadata.get("name", ""),
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": metadata.get("name", ""), "uid": metadata.get("uid", "")}
            ],
        },
        "spec": {"drivers": []},
    }


def _keeps_count(entry: Mapping[str, Any], max_volumes: int) -> bool:
    count = (entry.get("allocatable") or {}).get("count")
    if max_volumes == 0:
        return count is None
    return count == max_volumes


def driver_entry(driver: str, info: DriverNodeInfo) -> Obj:
    entry: Obj = {"name": driver, "nodeID": info.node_id, "topologyKeys": sorted(info.topology)}
    if info.max_volumes_per_node > 0:
        # As upstream: a limit above int32 is truncated; a negative one is left out (and logged).
        entry["allocatable"] = {"count": min(info.max_volumes_per_node, MAX_INT32)}
    elif info.max_volumes_per_node < 0:
        log.error("invalid attach limit driver=%s limit=%d", driver, info.max_volumes_per_node)
    return entry


def installed_drivers(csinode: Obj, driver: str, info: DriverNodeInfo) -> list[Obj] | None:
    """spec.drivers with the driver's entry (re)placed last, as upstream; None when its entry is already right."""
    drivers = list((csinode.get("spec") or {}).get("drivers") or [])
    others = []
    for entry in drivers:
        if entry.get("name") == driver:
            if (
                entry.get("nodeID") == info.node_id
                and set(entry.get("topologyKeys") or []) == set(info.topology)
                and _keeps_count(entry, min(info.max_volumes_per_node, MAX_INT32))
            ):
                return None
        else:
            others.append(entry)
    return [*others, driver_entry(driver, info)]


def uninstalled_drivers(csinode: Obj, driver: str) -> list[Obj] | None:
    """spec.drivers without the driver; None when it was not there."""
    drivers = list((csinode.get("spec") or {}).get("drivers") or [])
    kept = [entry for entry in drivers if entry.get("name") != driver]
    return None if len(kept) == len(drivers) else kept


async def retry_with_backoff(
    attempt: Callable[[], Awaitable[None]], *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
) -> list[Exception]:
    """Upstream's wait.ExponentialBackoff(updateBackoff): up to 4 tries; the errors of the failed ones (empty on
    success, 4 errors when every try failed)."""
    errors: list[Exception] = []
    delay = UPDATE_BACKOFF_FIRST
    for step in range(UPDATE_BACKOFF_STEPS):
        try:
            await attempt()
            return []
        except (KubeError, NodeInfoError) as exc:
            errors.append(exc)
        if step < UPDATE_BACKOFF_STEPS - 1:
            await sleep(delay)
            delay *= UPDATE_BACKOFF_FACTOR
    return errors


def _aggregate(errors: list[Exception]) -> str:
    # Go's utilerrors.NewAggregate: one error as is, several in brackets.
    texts = [str(error) for error in errors]
    return texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"


class NodeInfoManager:
    def __init__(self, client: KubeClient, node_name: str) -> None:
        self._client = client
        self._node_name = node_name
        self._lock = asyncio.Lock()  # upstream's nim.lock: one read-modify-write at a time

    async def _patch_node(self, make: Callable[[Obj], Obj | None]) -> None:
        async with self._lock:
            node = await self._client.get(paths.node(self._node_name))
            patch = make(node)
            if patch is not None:
                # As upstream's PatchNodeStatus: a strategic merge patch through the status subresource, which
                # takes metadata changes too.
                await self._client.patch(paths.node(self._node_name), patch, subresource="status")

    async def _update_node(self, make: Callable[[Obj], Obj | None]) -> None:
        errors = await retry_with_backoff(lambda: self._patch_node(make))
        if errors:
            raise NodeInfoError(
                f"error updating node: timed out waiting for the condition; caused by: {_aggregate(errors)}"
            )

    def _csinode_path(self) -> str:
        return paths.api_path("csinodes", group="storage.k8s.io", name=self._node_name)

    async def create_csinode(self) -> Obj:
        node = await self._client.get(paths.node(self._node_name))
        return await self._client.create(paths.api_path("csinodes", group="storage.k8s.io"), new_csinode(node))

    async def _get_or_create_csinode(self) -> Obj:
        try:
            return await self._client.get(self._csinode_path())
        except NotFound:
            return await self.create_csinode()

    async def initialize_csinode(self) -> None:
        """At start, as upstream's InitializeCSINodeWithAnnotation: the CSINode exists (created with no drivers)."""

        async def attempt() -> None:
            async with self._lock:
                await self._get_or_create_csinode()

        errors = await retry_with_backoff(attempt)
        if errors:
            raise NodeInfoError(
                "error updating CSINode annotation: timed out waiting for the condition; caused by: " + str(errors[-1])
            )

    async def install_driver(self, driver: str, info: DriverNodeInfo) -> None:
        if not info.node_id:
            raise NodeInfoError("error adding CSI driver node info: driverNodeID must not be empty")
        try:
            await self._update_node(lambda node: install_patch(node, driver, info.node_id, info.topology))
        except NodeInfoError as exc:
            raise NodeInfoError(f"error updating Node object with CSI driver node info: {exc}") from exc

        async def attempt() -> None:
            async with self._lock:
                csinode = await self._get_or_create_csinode()
                drivers = installed_drivers(csinode, driver, info)
                if drivers is not None:
                    updated = {**csinode, "spec": {**(csinode.get("spec") or {}), "drivers": drivers}}
                    await self._client.replace(self._csinode_path(), updated)

        errors = await retry_with_backoff(attempt)
        if errors:
            raise NodeInfoError(
                "error updating CSINode object with CSI driver node info: error updating CSINode: timed out waiting "
                f"for the condition; caused by: {_aggregate(errors)}"
            )

    async def uninstall_driver(self, driver: str) -> None:
        async def attempt() -> None:
            async with self._lock:
                try:
                    csinode = await self._client.get(self._csinode_path())
                except NotFound:
                    return
                drivers = uninstalled_drivers(csinode, driver)
                if drivers is not None:
                    updated = {**csinode, "spec": {**(csinode.get("spec") or {}), "drivers": drivers}}
                    await self._client.replace(self._csinode_path(), updated)

        errors = await retry_with_backoff(attempt)
        if errors:
            raise NodeInfoError(
                "error uninstalling CSI driver from CSINode object error updating CSINode: timed out waiting for the "
                f"condition; caused by: {_aggregate(errors)}"
            )
        try:
            await self._update_node(lambda node: uninstall_patch(node, driver))
        except NodeInfoError as exc:
            raise NodeInfoError(f"error removing CSI driver node info from Node object {exc}") from exc
