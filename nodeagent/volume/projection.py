"""What the API data volumes (configMap, secret, downwardAPI, projected) share: fetching their objects with the
node's credential, and writing a payload with the atomic writer into a directory (on disk, or on a tmpfs for
secrets and projected volumes, as upstream wraps an emptyDir of medium Memory for them).

A first set up that fails removes what it made; a later one (a refresh) that fails leaves the old content and the
volume as they were: the writer only swaps complete versions.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import posixpath
from collections.abc import Mapping
from typing import Any

from nodeagent.kube.errors import ApiError, KubeError
from nodeagent.volume.atomic_writer import DATA_DIR_NAME, AtomicWriter, FileProjection
from nodeagent.volume.emptydir import node_allocatable_memory, set_up_dir, tear_down_dir, tmpfs_size
from nodeagent.volume.errors import MountError, SetUpError, TearDownError
from nodeagent.volume.fsutil import os_error_text
from nodeagent.volume.mounter import Mounter, mount_at
from nodeagent.volume.ownership import pod_fs_group, set_volume_ownership
from nodeagent.volume.plugin import Pod, Volume, VolumeHost, pod_name, pod_namespace, pod_uid, volume_name

DEFAULT_MODE = 0o644

# The singular names upstream's object managers put in a NotFound ("configmap \"x\" not found").
_KIND = {"configmaps": "configmap", "secrets": "secret"}


async def get_object(host: VolumeHost, resource: str, namespace: str, name: str) -> Mapping[str, Any] | None:
    """The object, None when it does not exist; other failures (forbidden, apiserver away) raise SetUpError."""
    if host.get_object is None:
        raise SetUpError(f"cannot get {_KIND.get(resource, resource)} {namespace}/{name}: no apiserver (standalone)")
    try:
        return await host.get_object(resource, namespace, name)
    except ApiError as exc:
        raise SetUpError(exc.message) from exc
    except KubeError as exc:
        raise SetUpError(str(exc)) from exc


def not_found(resource: str, name: str) -> SetUpError:
    return SetUpError(f'{_KIND.get(resource, resource)} "{name}" not found')


def default_mode(source: Mapping[str, Any]) -> int:
    mode = source.get("defaultMode")
    return int(mode) if mode is not None else DEFAULT_MODE


def aggregate(errors: list[str]) -> str:
    """utilerrors.NewAggregate's text: one error as it is, several as `[a, b]`."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def _write(
    mounter: Mounter,
    path: str,
    payload: Mapping[str, FileProjection],
    *,
    memory: bool,
    size: int,
    ctx: str,
    fs_group: int | None,
) -> None:
    first = not os.path.lexists(posixpath.join(path, DATA_DIR_NAME))
    try:
        set_up_dir(mounter, path, memory=memory, size=size)
        # As upstream's setPerms hook: the new version gets the fsGroup before it becomes visible.
        AtomicWriter(path, ctx).write(payload, lambda _: set_volume_ownership(path, fs_group, read_only=True))
    except BaseException:
        if first:
            # Nothing half made stays behind; a container never saw it.
            with contextlib.suppress(OSError, MountError):
                tear_down_dir(mounter, path)
        raise


async def write_volume(
    host: VolumeHost,
    plugin: str,
    pod: Pod,
    volume: Volume,
    payload: Mapping[str, FileProjection],
    *,
    memory: bool,
) -> str:
    uid, name = pod_uid(pod), volume_name(volume)
    path = host.dirs.volume_dir(uid, plugin, name)
    size = tmpfs_size(pod, volume, node_allocatable_memory(host)) if memory else 0
    ctx = f"pod {pod_namespace(pod)}/{pod_name(pod)} volume {name}"
    write = functools.partial(_write, memory=memory, size=size, ctx=ctx, fs_group=pod_fs_group(pod))
    try:
        await asyncio.to_thread(write, host.mounter, path, payload)
    except OSError as exc:
        raise SetUpError(os_error_text(exc, "write")) from exc
    except MountError as exc:
        raise SetUpError(str(exc)) from exc
    return path


async def tear_down_volume(host: VolumeHost, plugin: str, uid: str, name: str) -> None:
    path = host.dirs.volume_dir(uid, plugin, name)
    try:
        await asyncio.to_thread(tear_down_dir, host.mounter, path)
    except OSError as exc:
        raise TearDownError(os_error_text(exc, "remove")) from exc
    except MountError as exc:
        raise TearDownError(str(exc)) from exc


def reconstruct_volume(host: VolumeHost, plugin: str, uid: str, name: str, *, memory: bool) -> str | None:
    """Set up before a restart: the writer's `..data` is there (a first write finished), and for a memory volume
    its tmpfs is still mounted (after a reboot it is not: then it is set up afresh)."""
    path = host.dirs.volume_dir(uid, plugin, name)
    if not os.path.islink(posixpath.join(path, DATA_DIR_NAME)):
        return None
    if memory:
        top = mount_at(host.mounter.mounts(), path)
        if top is None or top.fstype != "tmpfs":
            return None
    return path
