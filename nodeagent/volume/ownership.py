"""fsGroup ownership (upstream pkg/volume/volume_linux.go SetVolumeOwnership): every file and directory of a volume
gets the pod's fsGroup as its group, group read (and write unless the volume is read-only), and directories the
setgid bit and group search, so what containers create there belongs to the group too.

As upstream: symlinks get the group but no chmod (it would go through to their target); a failing chown or chmod is
logged, not fatal; only the volumes the kubelet manages (emptyDir and the API data volumes) and CSI volumes whose
driver leaves it to the kubelet get it, never hostPath.

The pod's fsGroupChangePolicy (`OnRootMismatch`) is honoured only where upstream passes it: CSI volumes (csi_mounter
SetUpAt hands the mounter args' policy to NewVolumeOwnership). emptyDir and the API data volumes get none (upstream
passes nil for them), so their walk always runs. With `OnRootMismatch` the walk is skipped when the volume's root
already looks done (upstream requiresPermissionChange): a directory whose group is the fsGroup, with the setgid bit,
and whose permission bits include rwx for user and group (r-x for both on a read-only volume). A root that cannot be
read, or that is not a directory, is walked.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

RW_MASK = 0o660
RO_MASK = 0o440
EXEC_MASK = 0o110

# core/v1 PodFSGroupChangePolicy values.
FS_GROUP_CHANGE_ON_ROOT_MISMATCH = "OnRootMismatch"
FS_GROUP_CHANGE_ALWAYS = "Always"


def pod_fs_group(pod: Mapping[str, Any]) -> int | None:
    value = ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
    return int(value) if value is not None else None


def pod_fs_group_change_policy(pod: Mapping[str, Any]) -> str | None:
    value = ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroupChangePolicy")
    return str(value) if value is not None else None


def requires_permission_change(root: str, fs_group: int, *, read_only: bool) -> bool:
    """Upstream requiresPermissionChange: whether the volume's root does not yet look owned by `fs_group`."""
    try:
        st = os.stat(root)  # as upstream (os.Stat): a root that is a symlink is judged by its target
    except OSError as exc:
        log.warning("fsGroup walking volume: reading its root failed path=%s error=%s", root, exc)
        return True
    if st.st_gid != fs_group:
        return True
    if not stat.S_ISDIR(st.st_mode):
        return True
    wanted = (RO_MASK if read_only else RW_MASK) | EXEC_MASK
    return stat.S_IMODE(st.st_mode) & wanted != wanted or not st.st_mode & stat.S_ISGID


def skip_permission_change(root: str, fs_group: int, policy: str | None, *, read_only: bool) -> bool:
    """Upstream skipPermissionChange: only OnRootMismatch may skip, and only when the root already matches."""
    if policy != FS_GROUP_CHANGE_ON_ROOT_MISMATCH:
        return False
    return not requires_permission_change(root, fs_group, read_only=read_only)


def _change(path: str, fs_group: int, read_only: bool) -> None:
    try:
        os.lchown(path, -1, fs_group)
    except OSError as exc:
        log.warning("fsGroup chown failed path=%s error=%s", path, exc)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return
    mask = RO_MASK if read_only else RW_MASK
    if stat.S_ISDIR(st.st_mode):
        mask |= stat.S_ISGID | EXEC_MASK
    try:
        os.chmod(path, stat.S_IMODE(st.st_mode) | mask)
    except OSError as exc:
        log.warning("fsGroup chmod failed path=%s error=%s", path, exc)


def set_volume_ownership(path: str, fs_group: int | None, *, read_only: bool, change_policy: str | None = None) -> None:
    """Blocking: run it in a thread (it is, inside the plugins' set up). `change_policy` is the pod's
    fsGroupChangePolicy, for the volumes upstream passes it for (None: always walk)."""
    if fs_group is None:
        return
    if skip_permission_change(path, fs_group, change_policy, read_only=read_only):
        log.info(
            "fsGroup skipping permission and ownership change path=%s fs_group=%d policy=%s",
            path,
            fs_group,
            change_policy,
        )
        return
    _change(path, fs_group, read_only)
    for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
        for name in [*dirnames, *filenames]:
            _change(os.path.join(dirpath, name), fs_group, read_only)
