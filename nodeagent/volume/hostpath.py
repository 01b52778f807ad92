"""hostPath (upstream pkg/volume/hostpath): a path of the node, mounted as it is; nothing to set up or tear down
but upstream's checks: no `..` element, and the `type` check with upstream's messages (DirectoryOrCreate makes a
0755 directory, FileOrCreate an empty 0644 file, in the parent that must exist).
"""

from __future__ import annotations

import asyncio
import os
import stat

from nodeagent.volume.errors import SetUpError
from nodeagent.volume.fsutil import os_error_text
from nodeagent.volume.layout import HOST_PATH
from nodeagent.volume.plugin import Pod, Volume

UNSET = ""
DIRECTORY_OR_CREATE = "DirectoryOrCreate"
DIRECTORY = "Directory"
FILE_OR_CREATE = "FileOrCreate"
FILE = "File"
SOCKET = "Socket"
CHAR_DEVICE = "CharDevice"
BLOCK_DEVICE = "BlockDevice"

_EXPECTED = {
    DIRECTORY: (stat.S_ISDIR, "directory"),
    FILE: (stat.S_ISREG, "file"),
    SOCKET: (stat.S_ISSOCK, "socket file"),
    CHAR_DEVICE: (stat.S_ISCHR, "character device"),
    BLOCK_DEVICE: (stat.S_ISBLK, "block device"),
}


def validate_no_backsteps(path: str) -> None:
    """Upstream ValidatePathNoBacksteps, with the hostPath plugin's wrapping."""
    if ".." in path.split("/"):
        raise SetUpError(f"invalid HostPath `{path}`: must not contain '..'")


def _mode(path: str) -> int | None:
    # Symlinks are followed, as upstream's os.Stat: a link to a directory is a directory, a dangling one is absent.
    try:
        return os.stat(path).st_mode
    except OSError:
        return None


def check_type(path: str, path_type: str) -> None:
    """Upstream checkTypeInternal. Raises SetUpError with upstream's message; may create a directory or file."""
    if path_type == UNSET:
        return
    if path_type == DIRECTORY_OR_CREATE:
        if _mode(path) is None:
            try:
                os.makedirs(path, mode=0o755, exist_ok=True)
            except OSError as exc:
                raise SetUpError(os_error_text(exc, "mkdir")) from exc
            return
        path_type = DIRECTORY
    elif path_type == FILE_OR_CREATE:
        if _mode(path) is None:
            try:
                os.close(os.open(path, os.O_CREAT | os.O_RDONLY | os.O_CLOEXEC, 0o644))
            except OSError as exc:
                raise SetUpError(os_error_text(exc, "open")) from exc
            return
        path_type = FILE
    expected = _EXPECTED.get(path_type)
    if expected is None:
        raise SetUpError(f"{path_type} is an invalid volume type")
    test, description = expected
    mode = _mode(path)
    if mode is None or not test(mode):
        raise SetUpError(f"hostPath type check failed: {path} is not a {description}")


class HostPathPlugin:
    name = HOST_PATH
    requires_remount = False
    read_only = False

    def can_support(self, volume: Volume) -> bool:
        return volume.get("hostPath") is not None

    async def set_up(self, pod: Pod, volume: Volume) -> str:
        del pod
        source = volume.get("hostPath") or {}
        path = str(source.get("path", ""))
        validate_no_backsteps(path)
        await asyncio.to_thread(check_type, path, str(source.get("type") or UNSET))
        return path

    async def tear_down(self, pod_uid: str, volume_name: str) -> None:
        del pod_uid, volume_name  # nothing was made

    def reconstruct(self, pod_uid: str, volume_name: str) -> str | None:
        del pod_uid, volume_name
        return None  # nothing on disk to find: the type check simply runs again
