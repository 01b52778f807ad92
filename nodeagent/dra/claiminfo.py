"""The DRA manager's claim cache and its checkpoint, `<root-dir>/dra_manager_state` (upstream: pkg/kubelet/cm/dra
claiminfo.go and state/).

One entry per claim (namespace/name) that a pod on this node uses: its UID, the pods that reference it, and per
driver the devices NodePrepareResources returned (with their CDI device IDs). Every change is written to the
checkpoint before the manager goes on, so a restarted agent still knows what is prepared and for which pods: it
passes the same CDI devices to a container it creates again, and unprepares a claim whose pods went away while it
was down. `prepared` is not checkpointed, as upstream: after a restart a pod's sync calls NodePrepareResources again
(drivers must make it idempotent), which also tells the driver that the claim is still in use.

The file is `{"Data": {"kind": "DRACheckpoint", "apiVersion": "checkpoint.dra.kubelet.k8s.io/v1", "Entries": [...]},
"Checksum": N}` with our checksum (FNV-1a 32 of the sorted JSON data), as the device manager's checkpoint: a file
written by one agent is not read by the other kubelet.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeagent.allocation.state import fnv1a_32

CHECKPOINT_NAME = "dra_manager_state"
CHECKPOINT_KIND = "DRACheckpoint"
CHECKPOINT_API_VERSION = "checkpoint.dra.kubelet.k8s.io/v1"


class CheckpointError(Exception):
    """The checkpoint exists but cannot be read or written."""


@dataclass(frozen=True)
class Device:
    pool_name: str
    device_name: str
    request_names: tuple[str, ...] = ()
    cdi_device_ids: tuple[str, ...] = ()


@dataclass
class ClaimInfo:
    claim_uid: str
    claim_name: str
    namespace: str
    pod_uids: set[str] = field(default_factory=set)
    # driver name -> devices it prepared (empty until NodePrepareResources answered).
    drivers: dict[str, list[Device]] = field(default_factory=dict)
    prepared: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.claim_name}"

    def cdi_devices(self, request_name: str) -> list[str]:
        """Upstream's cdiDevicesAsList: a device serves a request when it names it or names none; "" asks for all."""
        out: list[str] = []
        for driver in sorted(self.drivers):
            for device in self.drivers[driver]:
                if not request_name or not device.request_names or request_name in device.request_names:
                    out.extend(device.cdi_device_ids)
        return out


def _entry_json(info: ClaimInfo) -> dict[str, Any]:
    return {
        "ClaimUID": info.claim_uid,
        "ClaimName": info.claim_name,
        "Namespace": info.namespace,
        "PodUIDs": sorted(info.pod_uids),
        "DriverState": {
            driver: {
                "Devices": [
                    {
                        "PoolName": d.pool_name,
                        "DeviceName": d.device_name,
                        "RequestNames": list(d.request_names),
                        "CDIDeviceIDs": list(d.cdi_device_ids),
                    }
                    for d in devices
                ]
            }
            for driver, devices in sorted(info.drivers.items())
        },
    }


def _entry_from_json(entry: Mapping[str, Any]) -> ClaimInfo:
    drivers = {
        str(driver): [
            Device(
                pool_name=str(d.get("PoolName", "")),
                device_name=str(d.get("DeviceName", "")),
                request_names=tuple(str(r) for r in d.get("RequestNames") or ()),
                cdi_device_ids=tuple(str(c) for c in d.get("CDIDeviceIDs") or ()),
            )
            for d in (state or {}).get("Devices") or []
        ]
        for driver, state in (entry.get("DriverState") or {}).items()
    }
    return ClaimInfo(
        claim_uid=str(entry["ClaimUID"]),
        claim_name=str(entry["ClaimName"]),
        namespace=str(entry["Namespace"]),
        pod_uids={str(uid) for uid in entry.get("PodUIDs") or ()},
        drivers=drivers,
    )


def _checksum(data: Mapping[str, Any]) -> int:
    return fnv1a_32(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())


def write_checkpoint(path: str, infos: list[ClaimInfo]) -> None:
    """Writes aside and renames: a crash leaves the old checkpoint or the new one, never half of one."""
    body = {
        "kind": CHECKPOINT_KIND,
        "apiVersion": CHECKPOINT_API_VERSION,
        "Entries": [_entry_json(info) for info in sorted(infos, key=lambda i: i.key)],
    }
    blob = json.dumps({"Data": body, "Checksum": _checksum(body)}).encode()
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    except OSError as exc:
        raise CheckpointError(f"could not write checkpoint {path}: {exc}") from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(blob)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise CheckpointError(f"could not write checkpoint {path}: {exc}") from exc


def read_checkpoint(path: str) -> list[ClaimInfo]:
    """The claims in the checkpoint at `path` (none when there is no file); CheckpointError when it is unusable."""
    try:
        with open(path, "rb") as handle:
            blob = handle.read()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CheckpointError(f"could not read checkpoint {path}: {exc}") from exc
    try:
        outer = json.loads(blob)
        body = outer["Data"]
        if _checksum(body) != int(outer["Checksum"]):
            raise CheckpointError(f"checkpoint {path} is corrupted: checksum mismatch")
        if body.get("kind") != CHECKPOINT_KIND or body.get("apiVersion") != CHECKPOINT_API_VERSION:
            raise CheckpointError(f"checkpoint {path} has kind/version {body.get('kind')}/{body.get('apiVersion')}")
        return [_entry_from_json(entry) for entry in body.get("Entries") or []]
    except CheckpointError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointError(f"checkpoint {path} cannot be read: {exc}") from exc


class ClaimInfoCache:
    """Claim key (namespace/name) -> ClaimInfo, checkpointed on `sync`. Callers hold the manager's lock."""

    def __init__(self, state_dir: str) -> None:
        self.path = os.path.join(state_dir, CHECKPOINT_NAME)
        self._claims: dict[str, ClaimInfo] = {info.key: info for info in read_checkpoint(self.path)}

    def get(self, name: str, namespace: str) -> ClaimInfo | None:
        return self._claims.get(f"{namespace}/{name}")

    def add(self, info: ClaimInfo) -> None:
        self._claims[info.key] = info

    def delete(self, name: str, namespace: str) -> None:
        self._claims.pop(f"{namespace}/{name}", None)

    def __iter__(self) -> Iterator[ClaimInfo]:
        return iter(list(self._claims.values()))

    def has_pod_reference(self, pod_uid: str) -> bool:
        return any(pod_uid in info.pod_uids for info in self._claims.values())

    def sync(self) -> None:
        write_checkpoint(self.path, list(self._claims.values()))
