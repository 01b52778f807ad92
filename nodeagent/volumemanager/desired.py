"""The desired state of the world (upstream volumemanager/cache/desired_state_of_world.go plus its populator): the
volumes of the pods that should run, by pod UID.

A pod enters (and is re-processed) on every sync of it; it leaves when its containers are gone. Only the volumes
some container mounts count, as upstream's GetPodVolumeNames: an unused volume is neither set up nor waited for.
A volume without a plugin on this node is recorded as a pod error (upstream AddErrorToPod): the pod's wait fails at
once with it, so the pod waits with a clear event and is never run without its volume.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeagent.volume.errors import UnsupportedVolumeError

Pod = Mapping[str, Any]
VolumeKey = tuple[str, str]  # (pod UID, volume name)


@dataclass(frozen=True)
class PluginInfo:
    """What the desired state needs to know of a volume's plugin."""

    name: str
    requires_remount: bool


# volume spec -> its plugin's info; raises UnsupportedVolumeError.
PluginLookup = Callable[[Mapping[str, Any]], PluginInfo]


@dataclass(frozen=True)
class VolumeToMount:
    pod_uid: str
    name: str
    volume: Mapping[str, Any]
    plugin: str
    requires_remount: bool

    @property
    def key(self) -> VolumeKey:
        return (self.pod_uid, self.name)


@dataclass
class PodVolumes:
    pod: Pod
    volumes: dict[str, VolumeToMount] = field(default_factory=dict)
    #: volume name -> why it cannot be processed (no plugin): the pod's wait fails with these.
    errors: dict[str, str] = field(default_factory=dict)


def pod_uid(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


def used_volume_names(pod: Pod) -> set[str]:
    """Volumes that some container (init, regular, ephemeral) mounts or uses as a device."""
    spec: Mapping[str, Any] = pod.get("spec") or {}
    names: set[str] = set()
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(key) or []:
            for mount in [*(container.get("volumeMounts") or []), *(container.get("volumeDevices") or [])]:
                if mount.get("name"):
                    names.add(str(mount["name"]))
    return names


def pod_volumes(pod: Pod, lookup: PluginLookup) -> PodVolumes:
    """The pod's volumes to set up, with their plugins, and the errors of those that have none."""
    uid = pod_uid(pod)
    used = used_volume_names(pod)
    out = PodVolumes(pod)
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        name = str(volume.get("name", ""))
        if name not in used:
            continue
        try:
            info = lookup(volume)
        except UnsupportedVolumeError as exc:
            out.errors[name] = f'failed to get Plugin from volumeSpec for volume "{name}" err={exc}'
            continue
        out.volumes[name] = VolumeToMount(uid, name, volume, info.name, info.requires_remount)
    return out


class DesiredStateOfWorld:
    def __init__(self) -> None:
        self._pods: dict[str, PodVolumes] = {}
        self._remount: set[VolumeKey] = set()

    def add_pod(self, pod: Pod, lookup: PluginLookup, *, mounted: Callable[[VolumeKey], bool]) -> PodVolumes:
        """Add or re-process a pod (upstream ReprocessPod): the newest pod object is kept (downwardAPI renders it),
        and every mounted volume whose content follows API objects is marked for a remount. `mounted` says whether a
        volume is in the actual state; reconstructed ones are marked by the caller."""
        entry = pod_volumes(pod, lookup)
        self._pods[pod_uid(pod)] = entry
        for volume in entry.volumes.values():
            if volume.requires_remount and mounted(volume.key):
                self._remount.add(volume.key)
        return entry

    def mark_remount(self, key: VolumeKey) -> None:
        self._remount.add(key)

    def remount_done(self, key: VolumeKey) -> None:
        self._remount.discard(key)

    def needs_remount(self, key: VolumeKey) -> bool:
        return key in self._remount

    def remove_pod(self, uid: str) -> None:
        self._pods.pop(uid, None)
        self._remount = {k for k in self._remount if k[0] != uid}

    def get(self, uid: str) -> PodVolumes | None:
        return self._pods.get(uid)

    def uids(self) -> set[str]:
        return set(self._pods)

    def volumes_to_mount(self) -> Iterator[VolumeToMount]:
        for entry in self._pods.values():
            yield from entry.volumes.values()

    def wants(self, key: VolumeKey) -> bool:
        entry = self._pods.get(key[0])
        return entry is not None and key[1] in entry.volumes
