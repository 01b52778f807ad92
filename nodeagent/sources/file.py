"""The static pod directory source (staticPodPath): manifests on disk as SETs for PodConfig (upstream: file.go).

- The path is a directory of manifests or one manifest file. In a directory, every regular file (symlinks followed)
  whose name does not start with "." is one Pod, in YAML or JSON; subdirectories are not entered. Files are read in
  name order, so of two files naming the same pod the first in that order keeps the name and PodConfig reports the
  other (a FailedValidation event naming both files).
- Every read is a SET of all the usable pods: a removed or newly broken file removes its pod; an edited one is a new
  pod (new content, new UID) replacing the old.
- A change in the directory (inotify, through watchfiles) re-reads it at once; a full re-read also happens every
  fileCheckFrequency (20 s), so a missed event costs at most one period.
- A missing path is a SET of nothing, as upstream: the source counts as seen and its pods stop. A path that cannot
  be read (permissions, I/O errors) is logged and changes nothing. Either way the path is looked at again with a
  backoff from 1 s up to the check period, and watched again once it is back (also after it was replaced).
- A manifest that cannot be used goes to the problem sink once per distinct problem (see `problems.py`); the other
  manifests are used as usual. Nothing a file contains stops the source or the agent.

Reading runs in a thread: it is file I/O plus YAML parsing of up to 1 MiB per manifest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import watchfiles

from nodeagent.clock import Clock, SystemClock
from nodeagent.podconfig.storage import Operation, SourceUpdate
from nodeagent.sources.manifest import MAX_MANIFEST_BYTES, ManifestError, load_manifest
from nodeagent.sources.problems import ManifestProblem, ProblemReporter, ProblemSink
from nodeagent.sources.static import FILE_SOURCE, InvalidManifest, NotAPod, decode_pod

log = logging.getLogger(__name__)

Pod = dict[str, Any]
SOURCE = FILE_SOURCE
INITIAL_BACKOFF = 1.0

# (path, period in ms) -> change batches; an empty batch when the period passed without a change.
Watcher = Callable[[str, int], AsyncGenerator[set[Any], None]]


@dataclass(frozen=True)
class Listing:
    """One read of the path: the usable pods (in name order), where each came from, and what was not usable."""

    pods: tuple[Pod, ...] = ()
    origins: Mapping[str, str] = field(default_factory=dict)  # pod UID -> file path
    problems: tuple[ManifestProblem, ...] = ()
    missing: bool = False
    identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the path, to notice it was replaced


def _read_capped(path: str) -> bytes:
    """The file's bytes, at most the manifest cap plus one (so an oversized file is recognised, never read whole)."""
    # O_NONBLOCK: a FIFO swapped in after the stat must not hang the reader.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        chunks: list[bytes] = []
        left = MAX_MANIFEST_BYTES + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def unparsable(reason: str) -> InvalidManifest:
    """Upstream file.go's words for a file that is no pod at all: not JSON/YAML, or another kind of object. (The
    file's path, which file.go puts first, is the problem's origin.)"""
    return InvalidManifest(f"couldn't parse as pod({reason}), please check config file")


def read_manifest_file(path: str, *, node_name: str) -> Pod:
    """One manifest file as a static pod. Raises InvalidManifest (with upstream's wording) or OSError."""
    data = _read_capped(path)
    try:
        obj = load_manifest(data)
    except ManifestError as exc:
        raise unparsable(str(exc)) from exc
    try:
        return decode_pod(obj, node_name=node_name, source=path, is_file=True)
    except NotAPod as exc:
        raise unparsable(exc.reason) from exc


def _one(path: str, node_name: str, pods: list[Pod], origins: dict[str, str], problems: list[ManifestProblem]) -> None:
    try:
        pod = read_manifest_file(path, node_name=node_name)
    except InvalidManifest as exc:
        problems.append(ManifestProblem(path, str(exc)))
        return
    except OSError as exc:
        problems.append(ManifestProblem(path, f"could not read the manifest: {exc.strerror or exc}"))
        return
    except Exception as exc:  # a bug of ours on strange input must not stop the source: report it, keep going
        log.exception("static pod manifest could not be decoded path=%s", path)
        problems.append(ManifestProblem(path, f"could not decode the manifest: {type(exc).__name__}: {exc}"))
        return
    pods.append(pod)
    origins[str(pod["metadata"]["uid"])] = path


def list_manifests(path: str, *, node_name: str) -> Listing:
    """Read the path (a directory or one file). Raises OSError when it exists but cannot be read."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return Listing(missing=True)
    identity = (info.st_dev, info.st_ino)
    pods: list[Pod] = []
    origins: dict[str, str] = {}
    problems: list[ManifestProblem] = []
    if stat.S_ISREG(info.st_mode):
        _one(path, node_name, pods, origins, problems)
        return Listing(tuple(pods), origins, tuple(problems), identity=identity)
    if not stat.S_ISDIR(info.st_mode):
        raise OSError(f"{path} is not a directory or a regular file")
    for name in sorted(os.listdir(path)):
        if name.startswith("."):
            continue
        entry = os.path.join(path, name)
        try:
            mode = os.stat(entry).st_mode
        except OSError as exc:  # a dangling symlink, a file removed meanwhile
            log.debug("static pod manifest skipped path=%s error=%s", entry, exc)
            continue
        if stat.S_ISDIR(mode):
            log.debug("static pod manifest path not recursed into path=%s", entry)
        elif stat.S_ISREG(mode):
            _one(entry, node_name, pods, origins, problems)
        else:
            problems.append(ManifestProblem(entry, "not a regular file"))
    return Listing(tuple(pods), origins, tuple(problems), identity=identity)


def _not_hidden(root: str) -> Callable[[watchfiles.Change, str], bool]:
    def keep(change: watchfiles.Change, path: str) -> bool:
        del change
        return path == root or not os.path.basename(path).startswith(".")

    return keep


async def watch_path(path: str, period_ms: int) -> AsyncGenerator[set[Any], None]:
    """inotify through watchfiles, not recursive; yields an empty set when `period_ms` passes without a change."""
    async for changes in watchfiles.awatch(
        path,
        watch_filter=_not_hidden(path),
        rust_timeout=period_ms,
        yield_on_timeout=True,
        recursive=False,
        debounce=400,
        step=50,
    ):
        yield changes


class FileSource:
    def __init__(
        self,
        path: str,
        *,
        node_name: str,
        push: Callable[[SourceUpdate], None],
        check_frequency: float,
        on_problem: ProblemSink,
        clock: Clock | None = None,
        watcher: Watcher = watch_path,
    ) -> None:
        # As upstream: the path as configured, without a trailing slash, so the UIDs it feeds do not depend on it.
        self._path = path.rstrip(os.sep) or os.sep
        self._node_name = node_name
        self._push = push
        self._period = max(check_frequency, INITIAL_BACKOFF)
        self._problems = ProblemReporter(on_problem)
        self._clock = clock or SystemClock()
        self._watcher = watcher
        self._state = ""  # what the path was at the last read: ok, missing, unreadable (to log changes only)
        self.reads = 0  # completed reads of the path

    async def sync_once(self) -> Listing | None:
        """Read the path and push the SET. None when the path could not be read (nothing was pushed)."""
        try:
            listing = await asyncio.to_thread(list_manifests, self._path, node_name=self._node_name)
        except OSError as exc:
            self.reads += 1
            if self._state != "unreadable":
                log.error("static pod path unreadable, its pods are kept path=%s error=%s", self._path, exc)
            self._state = "unreadable"
            return None
        if listing.missing:
            if self._state != "missing":
                log.warning("static pod path does not exist, watching for it path=%s", self._path)
            self._state = "missing"
        else:
            if self._state != "ok":
                log.info("static pod path read path=%s pods=%d", self._path, len(listing.pods))
            self._state = "ok"
        self._problems.report(listing.problems)
        self._push(SourceUpdate(SOURCE, Operation.SET, listing.pods, origins=listing.origins))
        self.reads += 1
        return listing

    async def run(self) -> None:
        """Runs until cancelled; never raises otherwise."""
        log.info("pod source started source=%s path=%s check_frequency=%ss", SOURCE, self._path, self._period)
        backoff = INITIAL_BACKOFF
        listing = await self.sync_once()
        while True:
            if listing is None or listing.missing or listing.identity is None:
                await self._clock.sleep(backoff)
                backoff = min(backoff * 2, self._period)
                listing = await self.sync_once()
                continue
            backoff = INITIAL_BACKOFF
            try:
                listing = await self._watch(listing.identity)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # watchfiles could not watch (the path went away between the read and the watch, inotify limits):
                # read on the period instead, and try to watch again.
                log.warning("static pod path not watched, re-reading periodically path=%s error=%s", self._path, exc)
                await self._clock.sleep(self._period)
                listing = await self.sync_once()

    async def _watch(self, identity: tuple[int, int]) -> Listing | None:
        """Re-read on every change and every period; return the read that found the path gone or replaced."""
        # aclosing: leaving the loop stops the watcher's thread now, not when the generator is collected.
        async with contextlib.aclosing(self._watcher(self._path, int(self._period * 1000))) as batches:
            async for changes in batches:
                if changes:
                    log.debug("static pod path changed path=%s changes=%d", self._path, len(changes))
                listing = await self.sync_once()
                if listing is None or listing.missing or listing.identity != identity:
                    log.info("static pod path gone or replaced, watching for it again path=%s", self._path)
                    return listing
        raise RuntimeError("the watch ended")
