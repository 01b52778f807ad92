"""The device manager's checkpoint, `<root-dir>/device-plugins/kubelet_internal_checkpoint` (upstream:
pkg/kubelet/cm/devicemanager/checkpoint).

It keeps, across a restart of the agent, which devices each container was given and the plugin's Allocate answer
for them (so a restarted agent puts the same devices, mounts and environment into a container it creates again,
and never hands a device in use to another pod), and the resources that had registered (so their capacity stays
on the Node, at zero, until their plugins come back or the grace period ends).

The layout is upstream's v2: `{"Data": {"PodDeviceEntries": [{"PodUID", "ContainerName", "ResourceName",
"DeviceIDs": {"<numa node>": [ids]}, "AllocResp": "<base64 ContainerAllocateResponse>"}], "RegisteredDevices":
{"<resource>": [ids]}}, "Checksum": N}`. The checksum is ours (FNV-1a 32 of the data as sorted JSON), not the Go
kubelet's spew-printed hash: a file written by one agent is not read by the other.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeagent.allocation.state import fnv1a_32

CHECKPOINT_NAME = "kubelet_internal_checkpoint"
# The NUMA node upstream files a device without topology under.
NODE_WITHOUT_TOPOLOGY = -1


class CheckpointError(Exception):
    """The checkpoint exists but cannot be read."""


@dataclass(frozen=True)
class PodDevicesEntry:
    pod_uid: str
    container_name: str
    resource_name: str
    # NUMA node -> device IDs on it.
    device_ids: Mapping[int, Sequence[str]] = field(default_factory=dict)
    # The plugin's ContainerAllocateResponse, serialized.
    alloc_resp: bytes = b""


@dataclass(frozen=True)
class CheckpointData:
    entries: tuple[PodDevicesEntry, ...] = ()
    # resource name -> the healthy device IDs it had.
    registered: Mapping[str, Sequence[str]] = field(default_factory=dict)


def _data_json(data: CheckpointData) -> dict[str, Any]:
    return {
        "PodDeviceEntries": [
            {
                "PodUID": e.pod_uid,
                "ContainerName": e.container_name,
                "ResourceName": e.resource_name,
                "DeviceIDs": {str(node): sorted(ids) for node, ids in sorted(e.device_ids.items())},
                "AllocResp": base64.b64encode(e.alloc_resp).decode(),
            }
            for e in data.entries
        ],
        "RegisteredDevices": {name: sorted(ids) for name, ids in sorted(data.registered.items())},
    }


def _checksum(data: Mapping[str, Any]) -> int:
    return fnv1a_32(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())


def write_checkpoint(path: str, data: CheckpointData) -> None:
    """Writes aside and renames, so a crash leaves the old checkpoint or the new one, never half of one."""
    body = _data_json(data)
    blob = json.dumps({"Data": body, "Checksum": _checksum(body)}).encode()
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(blob)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_checkpoint(path: str) -> CheckpointData | None:
    """The checkpoint at `path`; None when there is none; CheckpointError when it cannot be used."""
    try:
        with open(path, "rb") as handle:
            blob = handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(f"could not read checkpoint {path}: {exc}") from exc
    try:
        outer = json.loads(blob)
        body = outer["Data"]
        if _checksum(body) != int(outer["Checksum"]):
            raise CheckpointError(f"checkpoint {path} is corrupted: checksum mismatch")
        entries = tuple(
            PodDevicesEntry(
                pod_uid=str(e["PodUID"]),
                container_name=str(e["ContainerName"]),
                resource_name=str(e["ResourceName"]),
                device_ids={int(node): [str(i) for i in ids] for node, ids in (e.get("DeviceIDs") or {}).items()},
                alloc_resp=base64.b64decode(e.get("AllocResp") or ""),
            )
            for e in body.get("PodDeviceEntries") or []
        )
        registered = {str(k): [str(i) for i in v or []] for k, v in (body.get("RegisteredDevices") or {}).items()}
    except CheckpointError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointError(f"checkpoint {path} cannot be read: {exc}") from exc
    return CheckpointData(entries, registered)
