"""fsGroup ownership (upstream pkg/volume/volume_linux.go SetVolumeOwnership): every file and directory of a volume
gets the pod's fsGroup as its group, group read (and write unless the volume is read-only), and directories the
setgid bit and group search, so what containers create there belongs to the group too.

As upstream: symlinks get the group but no chmod (it would go through to their target); a failing chown or chmod is
logged, not fatal; only the volumes the kubelet manages (emptyDir and the API data volumes) get it, never hostPath.
fsGroupChangePolicy does not apply to them (upstream passes none for in-tree ephemeral volumes: the walk always
runs, and it is cheap for what they hold).
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


def pod_fs_group(pod: Mapping[str, Any]) -> int | None:
    value = ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
    return int(value) if value is not None else None


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


def set_volume_ownership(path: str, fs_group: int | None, *, read_only: bool) -> None:
    """Blocking: run it in a thread (it is, inside the plugins' set up)."""
    if fs_group is None:
        return
    _change(path, fs_group, read_only)
    for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
        for name in [*dirnames, *filenames]:
            _change(os.path.join(dirpath, name), fs_group, read_only)
