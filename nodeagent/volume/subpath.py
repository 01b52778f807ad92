"""The subPath guard (upstream pkg/volume/util/subpath, subpath_linux.go), against the known escapes
(CVE-2017-1002101, CVE-2021-25741): a container's subPath must stay inside its volume, and what the runtime
mounts must be what was checked.

- The subPath string: relative, no `..` element (upstream's messages).
- A missing subPath directory is made component by component with mkdirat under the volume, each created
  directory opened without following symlinks.
- All symlinks of the subPath resolved; the result must lie inside the volume ("subpath ... not within volume
  path ..."). Then every component is opened again from the volume root with openat(O_NOFOLLOW | O_PATH): a
  symlink swapped in meanwhile is found ("unexpected symlink found"). The file descriptor that passed is
  bind-mounted (`/proc/self/fd/N`) to `pods/<uid>/volume-subpaths/<volume>/<container>/<index>`, and that target is
  what the container gets: a later swap inside the volume cannot redirect it.
- Bind mounts are undone when the volume is torn down, before its directory goes.

Users get upstream's terse message ("failed to prepare subPath for volumeMount ..."); the details are logged,
since they describe the host's file system.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import posixpath
import stat

from nodeagent.volume.errors import MountError, SubPathError
from nodeagent.volume.mounter import Mounter, mount_at

log = logging.getLogger(__name__)

_NOFOLLOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_NOFOLLOW = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


def validate_subpath(sub: str) -> None:
    """The subPath as written (after subPathExpr expansion): upstream makeMounts' two checks and messages."""
    if sub.startswith("/"):
        raise SubPathError(f"error SubPath `{sub}` must not be an absolute path")
    if ".." in sub.split("/"):
        raise SubPathError(f"unable to provision SubPath `{sub}`: must not contain '..'")


def path_within_base(path: str, base: str) -> bool:
    """Upstream mount.PathWithinBase: the relative path from base does not start with a `..` step."""
    rel = posixpath.relpath(posixpath.normpath(path), posixpath.normpath(base))
    return rel != ".." and not rel.startswith("../")


def safe_open(path: str, base: str) -> int:
    """Open `path` (symlinks already resolved, inside `base`) one component at a time from `base`, never following
    a symlink; returns an O_PATH descriptor of the final component (upstream doSafeOpen)."""
    if not path_within_base(path, base):
        raise OSError(errno.EXDEV, f"path {path} is outside of allowed base {base}")
    rel = posixpath.relpath(path, base)
    segments = [] if rel == "." else rel.split("/")
    parent = os.open(base, _NOFOLLOW)
    current = base
    try:
        for segment in segments:
            current = posixpath.join(current, segment)
            child = os.open(segment, _PATH_NOFOLLOW, dir_fd=parent)
            if stat.S_ISLNK(os.fstat(child).st_mode):
                os.close(child)
                raise OSError(errno.ELOOP, f"unexpected symlink found {current}")
            os.close(parent)
            parent = child
    except BaseException:
        os.close(parent)
        raise
    return parent


def _existing_prefix(base: str, path: str) -> tuple[str, list[str]]:
    rel = posixpath.relpath(path, base)
    segments = [] if rel == "." else rel.split("/")
    current = base
    for i, segment in enumerate(segments):
        candidate = posixpath.join(current, segment)
        if not os.path.lexists(candidate):
            return current, segments[i:]
        current = candidate
    return current, []


def safe_make_dir(sub: str, base: str, perm: int) -> None:
    """mkdir -p of `sub` inside `base` that cannot be tricked out of it (upstream SafeMakeDir / doSafeMakeDir)."""
    real_base = os.path.realpath(base, strict=True)
    full = posixpath.normpath(posixpath.join(real_base, sub))
    if not path_within_base(full, real_base):
        raise OSError(errno.EXDEV, f"path {full} is outside of allowed base {real_base}")
    try:
        if stat.S_ISDIR(os.stat(full).st_mode):
            return
        raise OSError(errno.ENOTDIR, "not a directory", full)
    except FileNotFoundError:
        pass
    existing, to_create = _existing_prefix(real_base, full)
    real_existing = os.path.realpath(existing, strict=True)
    if not path_within_base(real_existing, real_base):
        raise OSError(errno.EXDEV, f"path {real_existing} is outside of allowed base {real_base}")
    parent = safe_open(real_existing, real_base)
    try:
        for name in to_create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, perm, dir_fd=parent)
            child = os.open(name, _NOFOLLOW | os.O_DIRECTORY, dir_fd=parent)
            os.close(parent)
            parent = child
            # The umask applied at mkdir: the volume root's mode is what was asked for.
            os.fchmod(parent, perm)
    finally:
        os.close(parent)


def bind_subpath(mounter: Mounter, *, path: str, volume_path: str, target: str) -> str:
    """Bind-mount the checked `path` (inside `volume_path`) at `target`; returns `target`. Idempotent: a target
    already bound to the same file is kept, one bound elsewhere is unmounted first. Raises OSError/MountError."""
    real_volume = os.path.realpath(volume_path, strict=True)
    real_path = os.path.realpath(path, strict=True)
    if not path_within_base(real_path, real_volume):
        raise OSError(errno.EXDEV, f'subpath "{real_path}" not within volume path "{real_volume}"')
    fd = safe_open(real_path, real_volume)
    try:
        if mount_at(mounter.mounts(), target) is not None:
            if os.path.samestat(os.stat(fd), os.stat(target)):
                return target
            mounter.unmount(target)
        os.makedirs(posixpath.dirname(target), mode=0o750, exist_ok=True)
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.makedirs(target, mode=0o750, exist_ok=True)
        elif not os.path.lexists(target):
            # A file is enough for every non-directory source: the bind mount takes the source's type.
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o640))
        try:
            mounter.bind(f"/proc/self/fd/{fd}", target)
        except MountError:
            _remove_target(target)
            raise
    finally:
        os.close(fd)
    return target


def _remove_target(target: str) -> None:
    # Only ever an empty directory or an empty file of ours: never a recursive removal, which could reach through a
    # bind mount that would not come off into the volume's (or the host's) data.
    try:
        if os.path.isdir(target) and not os.path.islink(target):
            os.rmdir(target)
        else:
            os.unlink(target)
    except FileNotFoundError:
        pass


def clean_subpaths(mounter: Mounter, volume_subpaths_dir: str) -> None:
    """Undo every bind mount under `volume-subpaths/<volume>` and remove its directories (upstream
    doCleanSubPaths). Raises OSError/MountError; what could not be unmounted is left, never removed."""
    if not os.path.isdir(volume_subpaths_dir):
        return
    for container in sorted(os.listdir(volume_subpaths_dir)):
        container_dir = posixpath.join(volume_subpaths_dir, container)
        if not os.path.isdir(container_dir) or os.path.islink(container_dir):
            continue
        for index in sorted(os.listdir(container_dir)):
            target = posixpath.join(container_dir, index)
            for _ in range(16):
                if mount_at(mounter.mounts(), target) is None:
                    break
                mounter.unmount(target)
            _remove_target(target)
        os.rmdir(container_dir)
    os.rmdir(volume_subpaths_dir)
    parent = posixpath.dirname(volume_subpaths_dir)
    try:
        os.rmdir(parent)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
            raise
