"""Which devices each container holds, with the plugin's Allocate answer for them (upstream: podDevices in
pkg/kubelet/cm/devicemanager/pod_devices.go), and what that answer makes of the container's runtime options."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from nodeagent.devicemanager.checkpoint import PodDevicesEntry
from nodeagent.devicemanager.v1beta1 import api_pb2

log = logging.getLogger(__name__)


@dataclass
class _Allocation:
    # NUMA node -> device IDs.
    device_ids: dict[int, list[str]]
    response: api_pb2.ContainerAllocateResponse

    def ids(self) -> set[str]:
        return {i for ids in self.device_ids.values() for i in ids}


@dataclass(frozen=True)
class DeviceRunContainerOptions:
    """What a container's devices add to its CRI config (upstream DeviceRunContainerOptions), in upstream's order:
    resources by name, then each plugin answer's entries; the first of a name or path wins."""

    envs: tuple[tuple[str, str], ...] = ()
    # (host path, container path, permissions)
    devices: tuple[tuple[str, str, str], ...] = ()
    # (host path, container path, read only)
    mounts: tuple[tuple[str, str, bool], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    cdi_devices: tuple[str, ...] = ()


@dataclass
class PodDevices:
    """pod UID -> container name -> resource name -> allocation."""

    _pods: dict[str, dict[str, dict[str, _Allocation]]] = field(default_factory=dict)

    def has_pod(self, uid: str) -> bool:
        return uid in self._pods

    def pods(self) -> set[str]:
        return set(self._pods)

    def insert(
        self,
        uid: str,
        container: str,
        resource: str,
        device_ids: Mapping[int, Sequence[str]],
        response: api_pb2.ContainerAllocateResponse,
    ) -> None:
        containers = self._pods.setdefault(uid, {})
        containers.setdefault(container, {})[resource] = _Allocation(
            {node: list(ids) for node, ids in device_ids.items()}, response
        )

    def delete(self, uids: Iterable[str]) -> None:
        for uid in uids:
            self._pods.pop(uid, None)

    def container_devices(self, uid: str, container: str, resource: str) -> set[str] | None:
        found = self._pods.get(uid, {}).get(container, {}).get(resource)
        return found.ids() if found is not None else None

    def container_resources(self, uid: str, container: str) -> dict[str, set[str]]:
        """resource name -> device IDs the container holds."""
        return {name: a.ids() for name, a in self._pods.get(uid, {}).get(container, {}).items()}

    def container_topology(self, uid: str, container: str) -> dict[str, dict[int, list[str]]]:
        """resource name -> NUMA node -> device IDs the container holds (for the PodResources API)."""
        return {
            name: {node: list(ids) for node, ids in a.device_ids.items()}
            for name, a in sorted(self._pods.get(uid, {}).get(container, {}).items())
        }

    def devices(self) -> dict[str, set[str]]:
        """resource name -> every device ID some container holds."""
        out: dict[str, set[str]] = {}
        for containers in self._pods.values():
            for resources in containers.values():
                for name, allocation in resources.items():
                    out.setdefault(name, set()).update(allocation.ids())
        return out

    def to_entries(self) -> tuple[PodDevicesEntry, ...]:
        return tuple(
            PodDevicesEntry(uid, container, resource, allocation.device_ids, allocation.response.SerializeToString())
            for uid, containers in sorted(self._pods.items())
            for container, resources in sorted(containers.items())
            for resource, allocation in sorted(resources.items())
        )

    def from_entries(self, entries: Iterable[PodDevicesEntry]) -> None:
        for entry in entries:
            response = api_pb2.ContainerAllocateResponse()
            response.ParseFromString(entry.alloc_resp)
            self.insert(entry.pod_uid, entry.container_name, entry.resource_name, entry.device_ids, response)

    def run_container_options(self, uid: str, container: str) -> DeviceRunContainerOptions | None:
        resources = self._pods.get(uid, {}).get(container)
        if resources is None:
            return None
        envs: dict[str, str] = {}
        devices: dict[str, tuple[str, str, str]] = {}
        mounts: dict[str, tuple[str, str, bool]] = {}
        annotations: dict[str, str] = {}
        cdi: dict[str, None] = {}
        for resource, allocation in sorted(resources.items()):
            response = allocation.response
            for key, value in sorted(response.envs.items()):
                if envs.setdefault(key, value) != value:
                    log.error("device env conflict container=%s env=%s resource=%s", container, key, resource)
            for dev in response.devices:
                known = devices.setdefault(dev.container_path, (dev.host_path, dev.container_path, dev.permissions))
                if known[0] != dev.host_path:
                    log.error("device path conflict container=%s path=%s resource=%s", container, known[1], resource)
            for mount in response.mounts:
                seen = mounts.setdefault(mount.container_path, (mount.host_path, mount.container_path, mount.read_only))
                if seen[0] != mount.host_path:
                    log.error("device mount conflict container=%s path=%s resource=%s", container, seen[1], resource)
            for key, value in sorted(response.annotations.items()):
                if annotations.setdefault(key, value) != value:
                    log.error("device annotation conflict container=%s key=%s resource=%s", container, key, resource)
            for device in response.cdi_devices:
                cdi.setdefault(device.name, None)
        return DeviceRunContainerOptions(
            envs=tuple(envs.items()),
            devices=tuple(devices.values()),
            mounts=tuple(mounts.values()),
            annotations=tuple(annotations.items()),
            cdi_devices=tuple(cdi),
        )
