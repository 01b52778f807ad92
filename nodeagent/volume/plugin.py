"""The one small Protocol every volume plugin implements, and what plugins share (upstream volume.VolumePlugin,
Mounter/Unmounter and VolumeHost, cut down to what a kubelet without attachable volumes needs).

A plugin sets a volume up for a pod and returns the host path containers mount; `set_up` is idempotent and is
called again for plugins whose content follows API objects (`requires_remount`: configMap, secret, downwardAPI,
projected) on every pod resync. `tear_down` removes what `set_up` made. `reconstruct` says, from disk and the mount
table only, whether a volume found under the pod directory is set up (restart safety: no remount, no duplicate).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from nodeagent.volume.layout import PodDirs
from nodeagent.volume.mounter import Mounter

Pod = Mapping[str, Any]
Volume = Mapping[str, Any]

# (resource, namespace, name) -> the object or None when it does not exist; other API failures raise.
ObjectGetter = Callable[[str, str, str], Awaitable[Mapping[str, Any] | None]]


class VolumePlugin(Protocol):
    #: upstream's plugin name, e.g. "kubernetes.io/configmap"; its escaped form names the directory.
    name: str
    #: set_up runs again on every pod resync (the content follows API objects or the pod's metadata).
    requires_remount: bool
    #: containers always get it read-only (upstream Attributes.ReadOnly: the API data volumes).
    read_only: bool

    def can_support(self, volume: Volume) -> bool: ...

    async def set_up(self, pod: Pod, volume: Volume) -> str: ...

    async def tear_down(self, pod_uid: str, volume_name: str) -> None: ...

    def reconstruct(self, pod_uid: str, volume_name: str) -> str | None: ...


@dataclass(frozen=True)
class VolumeHost:
    """What the node lends its plugins (upstream VolumeHost)."""

    dirs: PodDirs
    mounter: Mounter
    #: node allocatable, as the Node status reports it (memory for tmpfs sizes, resourceFieldRef limits).
    node_allocatable: Mapping[str, str] = field(default_factory=dict)
    #: bytes; used for tmpfs sizes when allocatable memory is unknown (standalone).
    memory_capacity: int = 0
    get_object: ObjectGetter | None = None


def pod_uid(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


def pod_namespace(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("namespace", ""))


def pod_name(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("name", ""))


def volume_name(volume: Volume) -> str:
    return str(volume.get("name", ""))


# The volume sources the API knows, by field name; those without a plugin here are refused with a clear event.
KNOWN_SOURCES = (
    "hostPath",
    "emptyDir",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "csi",
    "ephemeral",
    "image",
)


def source_type(volume: Volume) -> str:
    """The volume's source field (`configMap`, `persistentVolumeClaim`, ...), or "" when none is set."""
    for key in KNOWN_SOURCES:
        if volume.get(key) is not None:
            return key
    for key, value in volume.items():
        if key != "name" and isinstance(value, Mapping):
            return key
    return ""
