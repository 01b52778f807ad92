"""File system helpers shared by the plugins: Go-shaped error text and a removal that never crosses a mount."""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from nodeagent.volume.mounter import Mounter, mounts_under


def os_error_text(exc: OSError, op: str = "") -> str:
    """`open /x/y: no space left on device`, as Go's *PathError reads (upstream messages quote those)."""
    reason = (exc.strerror or str(exc)).lower()
    path = exc.filename if exc.filename is not None else ""
    parts = [p for p in (op, os.fsdecode(path) if path else "") if p]
    return f"{' '.join(parts)}: {reason}" if parts else reason


def exists(path: str) -> bool:
    return os.path.lexists(path)


def ensure_dir(path: str, mode: int) -> None:
    """mkdir -p, then the exact mode whatever the umask (upstream's emptyDir setupDir chmods for the same reason)."""
    os.makedirs(path, mode=mode, exist_ok=True)
    if stat.S_IMODE(os.lstat(path).st_mode) != mode:
        os.chmod(path, mode)


def _remove_tree(path: str, dev: int) -> None:
    # What vanishes meanwhile (another cleanup of the same pod directory) is simply gone.
    try:
        with os.scandir(path) as entries:
            children = list(entries)
    except FileNotFoundError:
        return
    for entry in children:
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode):
            if st.st_dev != dev:
                raise OSError(errno.EBUSY, "refusing to remove a mount point", entry.path)
            _remove_tree(entry.path, dev)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(path)


def remove_all_one_filesystem(path: str, mounter: Mounter | None = None) -> None:
    """rm -rf that refuses to cross into another file system or below any mount point listed in mountinfo (a bind
    mount from the same file system keeps st_dev, so only mountinfo shows it): removing through a subPath bind or a
    forgotten tmpfs would delete what is not ours (upstream removeall.RemoveAllOneFilesystem plus the mount check)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    if mounter is not None:
        below = mounts_under(mounter.mounts(), os.path.realpath(path))
        if below:
            raise OSError(errno.EBUSY, f"refusing to remove: {below[0].mount_point} is mounted", path)
    _remove_tree(path, st.st_dev)
