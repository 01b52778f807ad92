"""Online node expansion of a published CSI volume (upstream operation_generator.go nodeExpandVolume, node_expander.go
and pkg/volume/csi/expander.go), as the kubelet runs it at a pod's resync:

    the resizer grew the PV (spec.capacity) past the claim's status.capacity and set
    status.allocatedResourceStatuses[storage] = NodeResizePending, allocatedResources[storage] = the new size
        │
        ▼ claim status: NodeResizeInProgress               (MarkNodeExpansionInProgress)
        ▼ NodeExpandVolume(volume path, staging path, required_bytes = the new size), if the driver has EXPAND_VOLUME
        ▼ events FileSystemResizeSuccessful; claim status: capacity = the new size, the storage entry of
          allocatedResourceStatuses and the resize conditions gone      (MarkNodeExpansionFinishedWithRecovery)

A failure is a VolumeResizeFailed event on the pod ("NodeExpandVolume.NodeExpandVolume failed for volume ..."),
retried at the next resync. Upstream records FileSystemResizeSuccessful on the claim too; our event sink records
pod events only, so that one is left out.
"""

from __future__ import annotations

import decimal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.config.errors import QuantityError
from nodeagent.config.quantity import parse_quantity

STORAGE = "storage"
NODE_RESIZE_PENDING = "NodeResizePending"
NODE_RESIZE_IN_PROGRESS = "NodeResizeInProgress"
# upstream knownResizeConditions: what a finished node expansion clears from the claim's conditions.
RESIZE_CONDITIONS = frozenset({"FileSystemResizePending", "Resizing", "ControllerResizeError", "NodeResizeError"})

FILE_SYSTEM_RESIZE_SUCCESSFUL = "FileSystemResizeSuccessful"
VOLUME_RESIZE_FAILED = "VolumeResizeFailed"


@dataclass(frozen=True)
class Expansion:
    """One node expansion to run: the sizes (bytes) and the new size's quantity as the claim spells it."""

    old_bytes: int
    new_bytes: int
    new_quantity: str


def _bytes(quantity: Any) -> int | None:
    if quantity is None:
        return None
    try:
        return int(parse_quantity(str(quantity)).to_integral_value(rounding=decimal.ROUND_CEILING))
    except (QuantityError, ArithmeticError):
        return None


def plan(pvc: Mapping[str, Any], pv: Mapping[str, Any]) -> Expansion | None:
    """Whether the node expands now (upstream: the PV's capacity above the claim's status capacity, then
    NodeExpander.runPreCheck with RecoverVolumeExpansionFailure, GA: the new size is status.allocatedResources, and
    only a NodeResizePending or NodeResizeInProgress claim is expanded; one already at the new size is done)."""
    status: Mapping[str, Any] = pvc.get("status") or {}
    pv_bytes = _bytes(((pv.get("spec") or {}).get("capacity") or {}).get(STORAGE))
    old_bytes = _bytes((status.get("capacity") or {}).get(STORAGE)) or 0
    if pv_bytes is None or pv_bytes <= old_bytes:
        return None
    resize_status = str((status.get("allocatedResourceStatuses") or {}).get(STORAGE) or "")
    allocated = (status.get("allocatedResources") or {}).get(STORAGE)
    new_quantity = str(allocated) if allocated is not None else str(pv.get("spec", {}).get("capacity", {})[STORAGE])
    new_bytes = _bytes(new_quantity)
    if new_bytes is None or resize_status not in (NODE_RESIZE_PENDING, NODE_RESIZE_IN_PROGRESS):
        return None
    return Expansion(old_bytes, new_bytes, new_quantity)


def _version(pvc: Mapping[str, Any]) -> dict[str, Any]:
    # As upstream's PatchPVCStatus: the resourceVersion in the patch, so a stale claim is refused, as an update.
    return {"resourceVersion": str((pvc.get("metadata") or {}).get("resourceVersion", ""))}


def in_progress_patch(pvc: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch of the claim's status that says the node expands it (MarkNodeExpansionInProgress)."""
    return {
        "metadata": _version(pvc),
        "status": {"allocatedResourceStatuses": {STORAGE: NODE_RESIZE_IN_PROGRESS}},
    }


def finished_patch(pvc: Mapping[str, Any], expansion: Expansion) -> dict[str, Any]:
    """The merge patch of a finished node expansion (MarkNodeExpansionFinishedWithRecovery): the new capacity, the
    storage entry of allocatedResourceStatuses removed, and the resize conditions gone (others kept)."""
    status: Mapping[str, Any] = pvc.get("status") or {}
    statuses = {k: v for k, v in (status.get("allocatedResourceStatuses") or {}).items() if k != STORAGE}
    conditions = [c for c in status.get("conditions") or [] if c.get("type") not in RESIZE_CONDITIONS]
    return {
        "metadata": _version(pvc),
        "status": {
            "capacity": {STORAGE: expansion.new_quantity},
            # a merge patch removes a key set to null; the whole map when nothing else is left (upstream: nil)
            "allocatedResourceStatuses": {STORAGE: None} if statuses else None,
            "conditions": conditions or None,
        },
    }


class NotSupportedError(Exception):
    """The driver has no EXPAND_VOLUME node capability (upstream's OperationNotSupportedError)."""


def read_only_message(spec_name: str) -> str:
    return f'MountVolume.NodeExpandVolume failed for volume "{spec_name}" requested read-only file system'


def succeeded_message(spec_name: str, node_name: str) -> str:
    """Upstream GenerateMsg("MountVolume.NodeExpandVolume succeeded", nodeName)."""
    return f'MountVolume.NodeExpandVolume succeeded for volume "{spec_name}" {node_name}'


def failed_message(spec_name: str, error: str) -> str:
    return f'NodeExpandVolume.NodeExpandVolume failed for volume "{spec_name}" : {error}'
