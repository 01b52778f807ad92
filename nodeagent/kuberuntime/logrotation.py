"""Container log rotation, as upstream's container log manager (pkg/kubelet/logs/container_log_manager.go): so that a
chatty container cannot fill the disk.

The runtime writes each container's stdout and stderr to one CRI log file (`<pod log dir>/<container>/<n>.log`).
Every `containerLogMonitorInterval` (10 s) the manager lists the running containers, asks each one's status for its
log path and, when the file has reached `containerLogMaxSize` (10Mi), rotates it as upstream does:

1. files left by an earlier, interrupted rotation go (`.tmp` files; a rotated file whose `.gz` already exists);
2. the oldest rotated files go until `containerLogMaxFiles - 2` are left (the file being rotated and the runtime's
   fresh one make up the rest), oldest first so that a reader of the newer ones is not cut off;
3. the rotated files that are left are gzip-compressed (`<log>.<time>.gz`, through `<log>.<time>.gz.tmp`);
4. the current file is renamed `<log>.<time>` (Go's `20060102-150405`, local time) and left uncompressed, since the
   runtime and any follower may still be writing and reading it;
5. CRI ReopenContainerLog makes the runtime open a fresh file at the log path. If that fails the rename is undone,
   so the next pass tries again (a kubelet restart in between would leave the file renamed, as upstream).

A missing log file is reopened first (the runtime recreates it). Stopped containers are not rotated: they write
nothing more. One deviation: upstream renames over a rotated file of the same second; here the rotation waits for
the next pass instead, because the older file would otherwise be lost (or, once compressed, taken for a leftover).

The decisions (which files go, which get compressed, the new name) are pure functions over file names; the file
operations are thin functions run in a worker thread, since compressing 10 MiB takes a noticeable fraction of a
second.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import glob
import gzip
import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from cri.errors import CRIError
from cri.v1 import api_pb2
from nodeagent.clock import Clock
from nodeagent.config.errors import QuantityError
from nodeagent.config.quantity import parse_quantity

log = logging.getLogger(__name__)

# Go's reference time 20060102-150405: the suffix of a rotated log.
TIMESTAMP_FORMAT = "%Y%m%d-%H%M%S"
COMPRESS_SUFFIX = ".gz"
TMP_SUFFIX = ".tmp"

DEFAULT_MAX_SIZE = "10Mi"
DEFAULT_MAX_FILES = 5
DEFAULT_MAX_WORKERS = 1
DEFAULT_MONITOR_INTERVAL = 10.0


class LogRotationError(Exception):
    """A container's log could not be rotated (the pass goes on with the other containers)."""


class LogRuntime(Protocol):
    """The part of the CRI runtime service the log manager uses."""

    async def list_containers(
        self, filter: api_pb2.ContainerFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.Container]: ...

    async def container_status(
        self, container_id: str, verbose: bool = False, *, timeout: float | None = None
    ) -> api_pb2.ContainerStatusResponse: ...

    async def reopen_container_log(self, container_id: str, *, timeout: float | None = None) -> None: ...


@dataclass(frozen=True)
class LogRotatePolicy:
    """Upstream's LogRotatePolicy: rotate at `max_size` bytes (negative: never), keep `max_files` files in all."""

    max_size: int
    max_files: int


@dataclass(frozen=True)
class RotationPlan:
    """What one rotation of `log` does, in order: remove, compress, then rename the log to `rotated`."""

    log: str
    remove: tuple[str, ...]
    compress: tuple[str, ...]
    rotated: str


# Pure decisions.


def parse_max_size(size: str) -> int:
    """containerLogMaxSize in bytes (upstream parseMaxSize: a quantity that must be a whole number of bytes)."""
    try:
        value = parse_quantity(size)
    except QuantityError as exc:
        raise ValueError(f"failed to parse container log max size {size!r}: {exc}") from exc
    if value != value.to_integral_value():
        raise ValueError(f"failed to parse container log max size {size!r}: invalid max log size")
    return int(value)


def new_policy(max_size: str, max_files: int) -> LogRotatePolicy:
    """As upstream's NewContainerLogManager: fewer than two files is refused; a negative size turns rotation off."""
    if max_files <= 1:
        raise ValueError(f"invalid MaxFiles {max_files}, must be > 1")
    return LogRotatePolicy(max_size=parse_max_size(max_size), max_files=max_files)


def needs_rotation(size: int, policy: LogRotatePolicy) -> bool:
    return policy.max_size >= 0 and size >= policy.max_size


def is_in_use(name: str, names: Sequence[str]) -> bool:
    """Upstream isInUse: a `.tmp` file never is (a compression that did not finish), a `.gz` always is, and an
    uncompressed file is not once its `.gz` exists (a compression that finished but did not remove its source)."""
    if name.endswith(TMP_SUFFIX):
        return False
    if name.endswith(COMPRESS_SUFFIX):
        return True
    return name + COMPRESS_SUFFIX not in names


def filter_unused_logs(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """The rotated files split into (in use, left over), each in the given order."""
    in_use = [n for n in names if is_in_use(n, names)]
    unused = [n for n in names if not is_in_use(n, names)]
    return in_use, unused


def all_logs(log_path: str, rotated: Sequence[str]) -> list[str]:
    """Upstream GetAllLogs: the rotated files in use, oldest first, then the current log."""
    in_use, _ = filter_unused_logs(rotated)
    return [*sorted(in_use), log_path]


def rotated_name(log_path: str, now: datetime.datetime) -> str:
    return f"{log_path}.{now.strftime(TIMESTAMP_FORMAT)}"


def plan_rotation(log_path: str, rotated: Sequence[str], max_files: int, now: datetime.datetime) -> RotationPlan | None:
    """One rotation of `log_path` given the files `<log>.*` beside it, or None when the new name is already taken
    (a rotation in the same second: waiting for the next pass loses nothing)."""
    new_name = rotated_name(log_path, now)
    if new_name in rotated or new_name + COMPRESS_SUFFIX in rotated:
        return None
    in_use, unused = filter_unused_logs(rotated)
    # Names sort oldest first: the suffix is a timestamp, and a file's `.gz` comes right after it.
    in_use.sort()
    # The current file becomes a rotated one and the runtime opens a new one: those two plus max_files - 2 kept.
    keep = max(max_files - 2, 0)
    excess = in_use[: max(len(in_use) - keep, 0)]
    kept = in_use[len(excess) :]
    return RotationPlan(
        log=log_path,
        remove=(*unused, *excess),
        compress=tuple(n for n in kept if not n.endswith(COMPRESS_SUFFIX)),
        rotated=new_name,
    )


# Thin file operations (run in a worker thread).


def list_rotated(log_path: str) -> list[str]:
    """The files `<log>.*` (upstream's glob pattern), sorted."""
    return sorted(glob.glob(glob.escape(log_path) + ".*"))


def log_size(log_path: str) -> int | None:
    """The log's size, or None when there is no file."""
    try:
        return os.stat(log_path).st_size
    except FileNotFoundError:
        return None


def remove_file(path: str) -> None:
    # Gone already is what we wanted.
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def compress_log(path: str) -> None:
    """`path` → `path.gz` through `path.gz.tmp` with the same mode, then `path` removed (upstream compressLog; a
    crash in between leaves a `.tmp` or both files, which the next rotation cleans up)."""
    mode = os.stat(path).st_mode & 0o7777
    tmp = path + COMPRESS_SUFFIX + TMP_SUFFIX
    try:
        with open(path, "rb") as source:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
            with os.fdopen(fd, "wb") as target, gzip.GzipFile(fileobj=target, mode="wb") as zipped:
                shutil.copyfileobj(source, zipped, 1 << 20)
        os.rename(tmp, path + COMPRESS_SUFFIX)
    finally:
        remove_file(tmp)
    os.remove(path)


def prepare_rotation(plan: RotationPlan) -> None:
    """The removals and compressions of a plan, before the log itself is renamed."""
    for path in plan.remove:
        remove_file(path)
    for path in plan.compress:
        compress_log(path)


class ContainerLogManager:
    """Upstream's ContainerLogManager: `run` rotates the logs of running containers every monitor interval, with up
    to `max_workers` containers at a time; `clean` removes one container's logs.

    A pass ends before the next begins, so a container is never rotated twice at once (upstream's work queue gets
    the same from its de-duplicated keys)."""

    def __init__(
        self,
        runtime: LogRuntime,
        *,
        clock: Clock,
        max_size: str = DEFAULT_MAX_SIZE,
        max_files: int = DEFAULT_MAX_FILES,
        max_workers: int = DEFAULT_MAX_WORKERS,
        monitor_interval: float = DEFAULT_MONITOR_INTERVAL,
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"invalid max workers {max_workers}, must be >= 1")
        if monitor_interval <= 0:
            raise ValueError(f"invalid monitor interval {monitor_interval}, must be positive")
        self.policy = new_policy(max_size, max_files)
        self._runtime = runtime
        self._clock = clock
        self._max_workers = max_workers
        self._interval = monitor_interval
        self._lock = asyncio.Lock()
        self.rotations = 0

    @property
    def enabled(self) -> bool:
        return self.policy.max_size >= 0

    async def run(self) -> None:
        """Rotate for ever. With rotation off (a negative max size) this only waits, as upstream's stub manager."""
        if not self.enabled:
            log.info("container log rotation disabled maxSize=%d", self.policy.max_size)
            await asyncio.Event().wait()
        log.info(
            "initializing container log rotate workers workers=%d monitorPeriod=%ss", self._max_workers, self._interval
        )
        while True:
            # A pass in progress runs to its end when the agent stops: cancelled between the rename and the reopen,
            # the runtime would write into the rotated file until the next start.
            current = asyncio.ensure_future(self._one_pass())
            try:
                await asyncio.shield(current)
            except asyncio.CancelledError:
                await current
                raise
            await self._clock.sleep(self._interval)

    async def _one_pass(self) -> None:
        try:
            await self.rotate_logs()
        except CRIError as exc:
            log.error("failed to rotate container logs error=%s", exc)

    async def rotate_logs(self) -> None:
        """One pass over the running containers."""
        async with self._lock:
            containers = await self._runtime.list_containers(
                api_pb2.ContainerFilter(state=api_pb2.ContainerStateValue(state=api_pb2.CONTAINER_RUNNING))
            )
            # As upstream: only running containers write, so only their logs can grow.
            ids = [c.id for c in containers if c.state == api_pb2.CONTAINER_RUNNING]
            workers = asyncio.Semaphore(self._max_workers)

            async def one(container_id: str) -> None:
                async with workers:
                    try:
                        await self.rotate_container(container_id)
                    except (CRIError, LogRotationError) as exc:
                        log.error("failed to rotate log for container containerID=%s error=%s", container_id, exc)

            await asyncio.gather(*(one(i) for i in ids))

    async def rotate_container(self, container_id: str) -> bool:
        """Rotate one container's log if it has reached the max size. True when it was rotated."""
        status = await self._runtime.container_status(container_id)
        path = status.status.log_path
        if not path:
            return False
        size = await asyncio.to_thread(log_size, path)
        if size is None:
            # As upstream: the file went away (removed by hand, or a rotation whose reopen was lost): get a new one.
            try:
                await self._runtime.reopen_container_log(container_id)
            except CRIError as exc:
                raise LogRotationError(f"container log {path} does not exist, reopen failed: {exc}") from exc
            size = await asyncio.to_thread(log_size, path)
            if size is None:
                raise LogRotationError(f"container log {path} does not exist after reopen")
        if not needs_rotation(size, self.policy):
            return False
        await self._rotate(container_id, path, size)
        return True

    async def _rotate(self, container_id: str, path: str, size: int) -> None:
        rotated = await asyncio.to_thread(list_rotated, path)
        now = self._clock.wall().astimezone()  # Go formats time.Now() in local time
        plan = plan_rotation(path, rotated, self.policy.max_files, now)
        if plan is None:
            log.info("container log rotation postponed containerID=%s path=%s reason=name-taken", container_id, path)
            return
        try:
            await asyncio.to_thread(prepare_rotation, plan)
            await asyncio.to_thread(os.rename, path, plan.rotated)
        except OSError as exc:
            raise LogRotationError(f"failed to rotate log {path}: {exc}") from exc
        try:
            await self._runtime.reopen_container_log(container_id)
        except CRIError as exc:
            # Renamed back, so that the next pass tries again.
            try:
                await asyncio.to_thread(os.rename, plan.rotated, path)
            except OSError as rename_exc:
                log.error(
                    "failed to rename rotated log rotatedLog=%s newLog=%s containerID=%s error=%s",
                    plan.rotated,
                    path,
                    container_id,
                    rename_exc,
                )
            raise LogRotationError(f"failed to reopen container log {container_id}: {exc}") from exc
        self.rotations += 1
        log.info(
            "container log rotated containerID=%s path=%s size=%d rotatedLog=%s removed=%d compressed=%d",
            container_id,
            path,
            size,
            plan.rotated,
            len(plan.remove),
            len(plan.compress),
        )

    async def clean(self, container_id: str) -> None:
        """Remove every log file of a container, rotated ones included (upstream Clean, used when a container is
        removed)."""
        async with self._lock:
            status = await self._runtime.container_status(container_id)
            path = status.status.log_path
            if not path:
                return
            names = await asyncio.to_thread(glob.glob, glob.escape(path) + "*")
            for name in names:
                await asyncio.to_thread(remove_file, name)
