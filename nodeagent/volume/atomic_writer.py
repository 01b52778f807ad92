"""The atomic writer (upstream pkg/volume/util/atomic_writer.go): configMap, secret, downwardAPI and projected
volumes change their files all at once, so a reader never sees half an update.

Layout of a target directory:

    ..2026_11_25_10_00_00.123456789/   the real files of one version (the timestamped directory)
    ..data -> ..2026_11_25_10_00_00.123456789
    key    -> ..data/key               what users see (one symlink per top-level name)

A write builds the new version in a new timestamped directory, points `..data_tmp` at it and renames `..data_tmp`
over `..data` (rename(2) is atomic), then drops user-visible names that left the payload and the old version.
Anything that fails before the rename removes the new directory and leaves the old version untouched: a full tmpfs
or disk keeps the old content. Names starting with `..` are the writer's own. The caller serialises writes.
"""

from __future__ import annotations

import datetime
import logging
import os
import posixpath
import random
import shutil
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from nodeagent.volume.errors import PayloadError

log = logging.getLogger(__name__)

MAX_FILE_NAME_LENGTH = 255
MAX_PATH_LENGTH = 4096
DATA_DIR_NAME = "..data"
NEW_DATA_DIR_NAME = "..data_tmp"


@dataclass(frozen=True)
class FileProjection:
    data: bytes
    mode: int


def validate_path(target: str) -> None:
    """Upstream's validatePath: relative, no `..` element, not starting with `..`, bounded lengths."""
    if not target:
        raise PayloadError(f'invalid path: must not be empty: "{target}"')
    if target.startswith("/"):
        raise PayloadError(f"invalid path: must be relative path: {target}")
    if len(target) > MAX_PATH_LENGTH:
        raise PayloadError(f"invalid path: must be less than or equal to {MAX_PATH_LENGTH} characters")
    items = target.split("/")
    for item in items:
        if item == "..":
            raise PayloadError(f"invalid path: must not contain '..': {target}")
        if len(item) > MAX_FILE_NAME_LENGTH:
            raise PayloadError(
                f"invalid path: filenames must be less than or equal to {MAX_FILE_NAME_LENGTH} characters"
            )
    if items[0].startswith("..") and len(items[0]) > 2:
        raise PayloadError(f"invalid path: must not start with '..': {target}")


def validate_payload(payload: Mapping[str, FileProjection]) -> dict[str, FileProjection]:
    """Every path validated, then cleaned (`a//b/./c` → `a/b/c`), as upstream's validatePayload."""
    clean: dict[str, FileProjection] = {}
    for path, content in payload.items():
        validate_path(path)
        clean[posixpath.normpath(path)] = content
    return clean


def _write_file(path: str, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    except OSError as exc:
        # os.write names no file; upstream's message does ("write /x/..2026_.../key: no space left on device").
        if exc.filename is None:
            exc.filename = path
        raise
    finally:
        os.close(fd)
    # The umask applied at create: set the mode asked for, whatever it is.
    os.chmod(path, mode)


FileWriter = Callable[[str, bytes, int], None]


def _timestamp_prefix(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).strftime("..%Y_%m_%d_%H_%M_%S.")


def paths_to_remove(old: set[str], payload: Mapping[str, FileProjection]) -> set[str]:
    """Paths of the old version that the new payload neither has nor needs as a parent directory."""
    wanted: set[str] = set()
    for path in payload:
        sub = path
        while sub:
            wanted.add(sub)
            sub = posixpath.dirname(sub)
    return old - wanted


class AtomicWriter:
    def __init__(
        self,
        target_dir: str,
        log_context: str,
        *,
        now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
        write_file: FileWriter = _write_file,
    ) -> None:
        self._target = target_dir
        self._context = log_context
        self._now = now
        self._write_file = write_file

    @property
    def data_dir(self) -> str:
        return posixpath.join(self._target, DATA_DIR_NAME)

    def current(self) -> str:
        """The timestamped directory `..data` points at, or "" before the first write."""
        try:
            return os.readlink(self.data_dir)
        except FileNotFoundError:
            return ""

    def write(self, payload: Mapping[str, FileProjection], set_perms: Callable[[str], None] | None = None) -> bool:
        """Project `payload` into the target directory; True when something changed on disk."""
        clean = validate_payload(payload)
        old_ts = self.current()
        old_ts_path = posixpath.join(self._target, old_ts) if old_ts else ""
        to_remove: set[str] = set()
        if old_ts:
            to_remove = paths_to_remove(self._walk(old_ts_path), clean)
            if not to_remove and not self._differs(clean, old_ts_path):
                self._remove_stale(keep=old_ts)
                return False
        ts_dir = self._new_timestamp_dir()
        ts_name = posixpath.basename(ts_dir)
        try:
            self._write_payload(clean, ts_dir)
            if set_perms is not None:
                set_perms(ts_dir)
            self._create_user_visible(clean)
            tmp_link = posixpath.join(self._target, NEW_DATA_DIR_NAME)
            if os.path.lexists(tmp_link):
                os.unlink(tmp_link)
            os.symlink(ts_name, tmp_link)
            try:
                os.rename(tmp_link, self.data_dir)
            except OSError:
                os.unlink(tmp_link)
                raise
        except BaseException:
            shutil.rmtree(ts_dir, ignore_errors=True)
            raise
        # The swap is done: what follows only tidies up, and a failure there must not look like a failed write.
        for path in to_remove:
            if "/" in path:
                continue  # only the top-level names are symlinks of ours
            try:
                os.unlink(posixpath.join(self._target, path))
            except OSError as exc:
                log.warning("atomic writer could not prune context=%s path=%s error=%s", self._context, path, exc)
        self._remove_stale(keep=ts_name)
        return True

    # --- steps ---------------------------------------------------------------------------------------------

    @staticmethod
    def _walk(ts_path: str) -> set[str]:
        found: set[str] = set()
        for dirpath, dirnames, filenames in os.walk(ts_path):
            rel = posixpath.relpath(dirpath, ts_path)
            for name in [*dirnames, *filenames]:
                found.add(name if rel == "." else posixpath.join(rel, name))
        return found

    @staticmethod
    def _differs(payload: Mapping[str, FileProjection], ts_path: str) -> bool:
        # Content only, as upstream's shouldWriteFile: modes are fixed for a pod's life (its volumes are immutable),
        # and the fsGroup walk changes them on disk, which must not look like a change every resync.
        for path, projection in payload.items():
            full = posixpath.join(ts_path, path)
            try:
                if not stat.S_ISREG(os.lstat(full).st_mode):
                    return True
                with open(full, "rb") as f:
                    if f.read() != projection.data:
                        return True
            except FileNotFoundError:
                return True
        return False

    def _new_timestamp_dir(self) -> str:
        prefix = _timestamp_prefix(self._now())
        for _ in range(100):
            # Go's os.MkdirTemp appends random digits: ..2026_11_25_10_00_00.123456789
            path = posixpath.join(self._target, prefix + str(random.randrange(1_000_000_000)))
            try:
                os.mkdir(path, 0o755)
            except FileExistsError:
                continue
            # 0755 whatever the umask: group and other must be able to walk in.
            os.chmod(path, 0o755)
            return path
        raise FileExistsError(f"no free timestamped directory name in {self._target}")

    def _write_payload(self, payload: Mapping[str, FileProjection], ts_dir: str) -> None:
        for path, projection in sorted(payload.items()):
            full = posixpath.join(ts_dir, path)
            parent = posixpath.dirname(full)
            if parent != ts_dir:
                os.makedirs(parent, mode=0o755, exist_ok=True)
            self._write_file(full, projection.data, projection.mode & 0o7777)

    def _create_user_visible(self, payload: Mapping[str, FileProjection]) -> None:
        for path in payload:
            top = path.split("/", 1)[0]
            visible = posixpath.join(self._target, top)
            if not os.path.lexists(visible):
                os.symlink(posixpath.join(DATA_DIR_NAME, top), visible)

    def _remove_stale(self, *, keep: str) -> None:
        """Old timestamped directories: the one just replaced, and any a crash or an interrupted write left."""
        try:
            names = os.listdir(self._target)
        except FileNotFoundError:
            return
        for name in names:
            if not name.startswith("..") or name in (keep, DATA_DIR_NAME, NEW_DATA_DIR_NAME):
                continue
            path = posixpath.join(self._target, name)
            if os.path.islink(path) or not os.path.isdir(path):
                continue
            try:
                shutil.rmtree(path)
            except OSError as exc:
                log.warning(
                    "atomic writer could not remove old data context=%s dir=%s error=%s", self._context, name, exc
                )
