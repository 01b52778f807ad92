"""emptyDir (upstream pkg/volume/emptydir): a directory on the node's disk, or a tmpfs with `medium: Memory`.

The tmpfs size is upstream's calculateEmptyDirMemorySize: node allocatable memory, lowered to the pod's memory
limit when the pod cgroup has one (every container declares a memory limit, or a pod-level one is set), lowered
again to `sizeLimit` when that is smaller. `medium: HugePages*` needs hugetlbfs, which this node does not offer: a
clear FailedMount, never a silent disk directory. The API data volumes (configMap, downwardAPI on disk; secret,
projected on tmpfs) sit on the same directory setup, as upstream wraps an emptyDir for them.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
from decimal import Decimal
from typing import Any

from nodeagent.config.errors import QuantityError
from nodeagent.config.quantity import parse_quantity
from nodeagent.kuberuntime.cgroups import pod_resource_config
from nodeagent.volume.errors import MountError, SetUpError, TearDownError
from nodeagent.volume.fsutil import os_error_text, remove_all_one_filesystem
from nodeagent.volume.layout import EMPTY_DIR
from nodeagent.volume.mounter import Mounter, mount_at
from nodeagent.volume.ownership import pod_fs_group, set_volume_ownership
from nodeagent.volume.plugin import Pod, Volume, VolumeHost, pod_uid, volume_name

DEFAULT_PERM = 0o777
MEDIUM_MEMORY = "Memory"
READY_FILE = "ready"


def _quantity(value: Any) -> Decimal | None:
    try:
        return parse_quantity(str(value))
    except QuantityError:
        return None


def pod_memory_limit(pod: Pod) -> int | None:
    """The pod's memory limit as its cgroup gets it (upstream ResourceConfigForPod, which calculateEmptyDirMemorySize
    calls), or None when the cgroup gets none: the containers' aggregate with the overhead when every container
    declares a memory limit, or the pod-level memory limit (`spec.resources`) when the pod sets one."""
    memory = pod_resource_config(pod).memory
    return memory if memory else None


def tmpfs_size(pod: Pod, volume: Volume, node_allocatable_memory: int) -> int:
    """Bytes for `size=`; 0 means no size option (the kernel's default, half the RAM)."""
    size = node_allocatable_memory

    def fits(value: int) -> bool:
        return value > 0 and (size <= 0 or value <= size)

    pod_limit = pod_memory_limit(pod)
    if pod_limit is not None and fits(pod_limit):
        size = pod_limit
    limit_text = ((volume.get("emptyDir") or {}).get("sizeLimit")) if volume.get("emptyDir") is not None else None
    if limit_text is not None:
        limit = _quantity(limit_text)
        if limit is not None and fits(int(limit)):
            size = int(limit)
    return max(size, 0)


def node_allocatable_memory(host: VolumeHost) -> int:
    text = host.node_allocatable.get("memory")
    value = _quantity(text) if text else None
    return int(value) if value is not None and value > 0 else host.memory_capacity


def make_dir(path: str, mode: int) -> bool:
    """Create `path` (parents 0750, as upstream's pod directories) with exactly `mode`, if it is missing; True when
    this call made it."""
    if os.path.lexists(path):
        return False
    os.makedirs(posixpath.dirname(path), mode=0o750, exist_ok=True)
    os.mkdir(path, mode)
    os.chmod(path, mode)  # whatever the umask
    return True


def ensure_tmpfs(mounter: Mounter, path: str, size: int, *, fresh: bool = False) -> None:
    """Mount a tmpfs at `path` unless one is already there (set up is idempotent: a restart never mounts twice).
    `fresh`: the directory was made just now, so it is no mount point and the mount table need not be read (the
    costly part of a first set up: hundreds of lines on a busy node, for each of a pod's memory volumes)."""
    if not fresh:
        top = mount_at(mounter.mounts(), path)
        if top is not None and top.fstype == "tmpfs":
            return
    mounter.mount_tmpfs(path, [f"size={size}"] if size > 0 else [])


def set_up_dir(mounter: Mounter, path: str, *, memory: bool, size: int = 0) -> None:
    """The directory (0777, as upstream's emptyDir) and, for memory, its tmpfs. Blocking: run it in a thread."""
    made = make_dir(path, DEFAULT_PERM)
    if memory:
        ensure_tmpfs(mounter, path, size, fresh=made)


def tear_down_dir(mounter: Mounter, path: str) -> None:
    """Unmount whatever is mounted at the volume's directory (all of it, stacked mounts too), then remove it,
    never crossing another mount. Blocking: run it in a thread."""
    if not os.path.lexists(path):
        return
    for _ in range(16):
        if mount_at(mounter.mounts(), path) is None:
            break
        mounter.unmount(path)
    remove_all_one_filesystem(path, mounter)


class EmptyDirPlugin:
    name = EMPTY_DIR
    requires_remount = False
    read_only = False

    def __init__(self, host: VolumeHost) -> None:
        self._host = host

    def can_support(self, volume: Volume) -> bool:
        return volume.get("emptyDir") is not None

    def path(self, uid: str, name: str) -> str:
        return self._host.dirs.volume_dir(uid, EMPTY_DIR, name)

    def _ready_file(self, uid: str, name: str) -> str:
        return posixpath.join(self._host.dirs.plugin_dir(uid, EMPTY_DIR), name, READY_FILE)

    async def set_up(self, pod: Pod, volume: Volume) -> str:
        uid, name = pod_uid(pod), volume_name(volume)
        medium = str((volume.get("emptyDir") or {}).get("medium") or "")
        if medium.startswith("HugePages"):
            raise SetUpError(f"emptyDir medium {medium} is not supported on this node: hugetlbfs is not available")
        if medium not in ("", MEDIUM_MEMORY):
            raise SetUpError(f'unknown storage medium "{medium}"')
        memory = medium == MEDIUM_MEMORY
        size = tmpfs_size(pod, volume, node_allocatable_memory(self._host)) if memory else 0
        path = self.path(uid, name)
        try:
            await asyncio.to_thread(self._set_up, path, self._ready_file(uid, name), memory, size, pod_fs_group(pod))
        except OSError as exc:
            raise SetUpError(os_error_text(exc, "mkdir")) from exc
        except MountError as exc:
            raise SetUpError(str(exc)) from exc
        return path

    def _set_up(self, path: str, ready: str, memory: bool, size: int, fs_group: int | None) -> None:
        set_up_dir(self._host.mounter, path, memory=memory, size=size)
        if os.path.exists(ready):
            return  # set up before: as upstream, ownership is not walked again
        set_volume_ownership(path, fs_group, read_only=False)
        # As upstream's SetReady: the plugin's own record that this volume was set up.
        os.makedirs(posixpath.dirname(ready), mode=0o750, exist_ok=True)
        with open(ready, "w"):
            pass

    async def tear_down(self, pod_uid: str, volume_name: str) -> None:
        path = self.path(pod_uid, volume_name)
        ready_dir = posixpath.dirname(self._ready_file(pod_uid, volume_name))
        try:
            await asyncio.to_thread(self._tear_down, path, ready_dir)
        except (OSError, MountError) as exc:
            raise TearDownError(os_error_text(exc) if isinstance(exc, OSError) else str(exc)) from exc

    def _tear_down(self, path: str, ready_dir: str) -> None:
        remove_all_one_filesystem(ready_dir)
        tear_down_dir(self._host.mounter, path)

    def reconstruct(self, pod_uid: str, volume_name: str) -> str | None:
        path = self.path(pod_uid, volume_name)
        return path if os.path.isdir(path) else None
