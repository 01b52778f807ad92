"""The volume manager (upstream pkg/kubelet/volumemanager): keeps what is set up on this node equal to what the
pods that should run need, and tells a pod's sync when its volumes are ready.

    pod sync ── wait_for_attach_and_mount(pod) ──► desired state (pod re-processed: remounts marked)
                                                        │            ▲ unmount_pod(uid) after its containers
          reconciler (0.1 s while busy, else when woken)│            │ are gone; housekeeping lets go the
                                                        ▼            │ volumes of unknown pods
                      plugins: set_up / tear_down, one task per volume, back-off per operation
                                                        │
                                                        ▼ actual state (rebuilt from disk at start)

A failed set up records `FailedMount` ("MountVolume.SetUp failed for volume "cfg" : configmap "missing" not
found") and is retried with back-off; the pod's wait gives up after 2m3s as upstream's (podAttachAndMountTimeout)
with "unmounted volumes=[...], unattached volumes=[...], failed to process volumes=[...]: timed out waiting for the
condition", which the kubelet records as "Unable to attach or mount volumes: ..."; a volume without a plugin fails
the wait at once. A pod asked to terminate stops waiting (upstream cancels the sync's context).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from cri.v1 import api_pb2
from nodeagent.clock import Clock
from nodeagent.volume import csiblock, find_plugin
from nodeagent.volume.container_mounts import PodVolume, make_mounts
from nodeagent.volume.csierrors import event_message, is_uncertain
from nodeagent.volume.emptydir import make_dir
from nodeagent.volume.errors import MountError, SetUpError, TearDownError, VolumeError
from nodeagent.volume.fsutil import os_error_text, remove_all_one_filesystem
from nodeagent.volume.layout import PLUGINS, PodDirs
from nodeagent.volume.mounter import Mounter, mounts_under
from nodeagent.volume.plugin import VolumePlugin
from nodeagent.volume.subpath import clean_subpaths
from nodeagent.volume.token import TokenManager
from nodeagent.volumemanager.actual import ActualStateOfWorld, MountedVolume, reconstruct
from nodeagent.volumemanager.desired import (
    DesiredStateOfWorld,
    PluginInfo,
    VolumeKey,
    pod_uid,
    used_volume_names,
)
from nodeagent.volumemanager.reconciler import Backoff, Operation, OpKind, plan

log = logging.getLogger(__name__)

Pod = Mapping[str, Any]
# (pod, type, reason, message): the narrow seam to the event recorder.
EventSink = Callable[[Pod, str, str, str], None]

FAILED_MOUNT = "FailedMount"
POD_ATTACH_AND_MOUNT_TIMEOUT = 123.0  # upstream: 2 min + 3 s
POD_ATTACH_AND_MOUNT_RETRY = 0.3
RECONCILER_PERIOD = 0.1
TOKEN_GC_PERIOD = 60.0
TIMED_OUT = "timed out waiting for the condition"


def _no_events(pod: Pod, type_: str, reason: str, message: str) -> None:
    del pod, type_, reason, message


def go_list(values: Sequence[str]) -> str:
    """A []string as Go's %v prints it: `[a b]`."""
    return "[" + " ".join(values) + "]"


@runtime_checkable
class AttachableVolumes(Protocol):
    """A plugin whose volumes the attach-detach controller attaches (upstream AttachableVolumePlugin)."""

    def volumes_in_use(self) -> list[str]: ...


class VolumeWaitError(VolumeError):
    """A pod's volumes are not ready. `interrupted`: the pod is terminating, nothing to report (as upstream's
    wait.Interrupted)."""

    def __init__(self, message: str, *, unmounted: Sequence[str], interrupted: bool = False) -> None:
        super().__init__(message)
        self.unmounted = list(unmounted)
        self.interrupted = interrupted


class VolumeManager:
    def __init__(
        self,
        plugins: Sequence[VolumePlugin],
        *,
        dirs: PodDirs,
        mounter: Mounter,
        clock: Clock,
        events: EventSink = _no_events,
        tokens: TokenManager | None = None,
        wait_timeout: float = POD_ATTACH_AND_MOUNT_TIMEOUT,
    ) -> None:
        self._plugins = list(plugins)
        self._by_name = {p.name: p for p in self._plugins}
        self.dirs = dirs
        self._mounter = mounter
        self._clock = clock
        self._events = events
        self._tokens = tokens
        self._wait_timeout = wait_timeout
        self.desired = DesiredStateOfWorld()
        self.actual = ActualStateOfWorld()
        self._backoff = Backoff()
        self._released: set[str] = set()
        self._removing: set[str] = set()
        self._in_flight: set[VolumeKey] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        # Set by every change that can make work for the reconciler: a pod added, re-processed, removed or
        # released, an operation done.
        self._wake = asyncio.Event()
        self._watchers: set[asyncio.Event] = set()
        #: reconciler passes so far, and whether the last found nothing to do (its loop then waits for `_wake`).
        self.passes = 0
        self.idle = False

    # --- lifecycle -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Rebuild the actual state from disk and the mount table (before any pod syncs)."""

        def find(plugin_name: str, uid: str, name: str) -> tuple[str, bool] | None:
            plugin = self._by_name.get(plugin_name)
            if plugin is None:
                return None
            path = plugin.reconstruct(uid, name)
            return (path, plugin.read_only) if path is not None else None

        found = await asyncio.to_thread(reconstruct, self.dirs, find)
        for volume in found:
            self.actual.add(volume)
        self._wake.set()
        log.info("volume manager started root=%s reconstructed_volumes=%d", self.dirs.root_dir, len(found))

    async def run(self) -> None:
        """The reconciler's loop: a pass every 0.1 s while there is work (an operation running, waiting out its
        back-off, or due), else none until something changes the states (each change sets `_wake`) or the token
        cache's cleanup is due. The plan is a function of the states and the clock; only back-off reads the clock,
        and it holds back work that keeps the loop polling, so an idle loop misses nothing."""
        next_gc = self._clock.monotonic() + TOKEN_GC_PERIOD
        try:
            while True:
                self._wake.clear()
                self.reconcile()
                now = self._clock.monotonic()
                if self._tokens is not None and now >= next_gc:
                    self._tokens.cleanup()
                    next_gc = now + TOKEN_GC_PERIOD
                if not self.idle:
                    await self._sleep_or(self._wake, RECONCILER_PERIOD)
                elif self._tokens is None:
                    await self._wake.wait()
                else:
                    await self._sleep_or(self._wake, next_gc - now)
        finally:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def reconcile(self) -> list[Operation]:
        """One pass: start every operation the plan asks for (each its own task). It also notes whether the
        manager is idle: nothing to do, whether running, backing off, or due."""
        self.passes += 1
        now = self._clock.monotonic()
        # Planned as if nothing ran and nothing backed off (what is to do at all), then held back as plan() would.
        todo = plan(self.desired, self.actual, released=self._released, in_flight=frozenset(), not_before={}, now=now)
        not_before = self._backoff.not_before
        ops = [op for op in todo if op.key not in self._in_flight and not_before.get(op.key, 0.0) <= now]
        self.idle = not todo and not self._in_flight
        for op in ops:
            self._in_flight.add(op.key)
            task = asyncio.create_task(self._execute(op), name=f"volume-{op.kind.value}-{op.key[0]}-{op.key[1]}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return ops

    # --- what the kubelet calls ----------------------------------------------------------------------------

    async def wait_for_attach_and_mount(
        self,
        pod: Pod,
        *,
        cancelled: Callable[[], bool] = lambda: False,
        on_wait: Callable[[], None] = lambda: None,
    ) -> None:
        """Add (or re-process) the pod and wait until every volume its containers use is set up. Raises
        VolumeWaitError: at once for a volume without a plugin, after the timeout, or `interrupted` when the pod
        is asked to terminate meanwhile. `on_wait` runs once, when there is something to wait for (the kubelet
        publishes the pod's ContainerCreating status then)."""
        uid = pod_uid(pod)
        while uid in self._removing:  # an orphan sweep of this UID finishes first
            await self._clock.sleep(0.05)
        self._released.discard(uid)
        self.make_pod_dirs(uid)  # three mkdirs at most: not worth a thread
        entry = self.desired.add_pod(pod, self._lookup, mounted=lambda key: key in self.actual)
        for volume in entry.volumes.values():
            mounted = self.actual.get(volume.key)
            if mounted is not None and mounted.reconstructed:
                self.desired.mark_remount(volume.key)
        self._wake.set()
        expected = sorted(used_volume_names(pod))
        if entry.errors:
            unmounted = [n for n in expected if (uid, n) not in self.actual]
            raise VolumeWaitError(
                self._wait_message(uid, expected, "; ".join(entry.errors[n] for n in sorted(entry.errors))),
                unmounted=unmounted,
            )
        deadline = self._clock.monotonic() + self._wait_timeout
        waited = False
        while True:
            unmounted = [n for n in expected if (uid, n) not in self.actual]
            if not unmounted:
                return
            if not waited:
                waited = True
                on_wait()
            if cancelled():
                raise VolumeWaitError(
                    self._wait_message(uid, expected, "context canceled"), unmounted=unmounted, interrupted=True
                )
            left = deadline - self._clock.monotonic()
            if left <= 0:
                raise VolumeWaitError(self._wait_message(uid, expected, TIMED_OUT), unmounted=unmounted)
            await self._wait_change(min(left, POD_ATTACH_AND_MOUNT_RETRY))

    async def unmount_pod(self, uid: str) -> None:
        """The pod's containers are gone: tear its volumes down and wait for it (upstream WaitForUnmount)."""
        self.desired.remove_pod(uid)
        self._backoff.forget_pod(uid)
        self._released.add(uid)
        self._wake.set()
        deadline = self._clock.monotonic() + self._wait_timeout
        while self.actual.for_pod(uid) or any(key[0] == uid for key in self._in_flight):
            left = deadline - self._clock.monotonic()
            if left <= 0:
                names = sorted(v.name for v in self.actual.for_pod(uid))
                raise VolumeError(f"mounted volumes={go_list(names)}: {TIMED_OUT}")
            await self._wait_change(min(left, POD_ATTACH_AND_MOUNT_RETRY))

    def volumes_in_use(self) -> list[str]:
        """Unique names of the attachable volumes pods use here (node.status.volumesInUse): the plugins that have
        such volumes (kubernetes.io/csi) say which."""
        names: set[str] = set()
        for plugin in self._plugins:
            if isinstance(plugin, AttachableVolumes):
                names.update(plugin.volumes_in_use())
        return sorted(names)

    def plugin(self, name: str) -> VolumePlugin | None:
        """The plugin of that name (the agent hands kubernetes.io/csi to the stats provider, which asks it for its
        volumes' stats)."""
        return self._by_name.get(name)

    def mounted_volumes(self, uid: str) -> dict[str, PodVolume]:
        return {v.name: PodVolume(v.host_path, v.read_only) for v in self.actual.for_pod(uid) if not v.uncertain}

    async def container_mounts(
        self,
        pod: Pod,
        container: Mapping[str, Any],
        env: Callable[[], Sequence[tuple[str, str]]],
        supports_rro: bool = False,
    ) -> list[api_pb2.Mount]:
        """CRI mounts for one container; raises CreateContainerConfigError as upstream's makeMounts. `supports_rro`:
        the pod's runtime handler makes recursive read-only mounts."""
        if not container.get("volumeMounts"):
            return []
        volumes = self.mounted_volumes(pod_uid(pod))
        return await asyncio.to_thread(
            make_mounts, pod, container, volumes, env, dirs=self.dirs, mounter=self._mounter, supports_rro=supports_rro
        )

    async def container_devices(self, pod: Pod, container: Mapping[str, Any]) -> list[api_pb2.Device]:
        """CRI devices for one container's volumeDevices (mapped Block volumes); raises CreateContainerConfigError
        as upstream's makeBlockVolumes."""
        if not container.get("volumeDevices"):
            return []
        volumes = self.mounted_volumes(pod_uid(pod))
        mapped = csiblock.mapped_names([(name, v.host_path) for name, v in volumes.items()])
        return csiblock.container_devices(pod, container, mapped)

    async def cleanup_orphaned_pod_dirs(self, wanted: Callable[[str], bool]) -> None:
        """Housekeeping (upstream cleanupOrphanedPodDirs): let go the volumes of pods no source or worker knows,
        and remove the directories of such pods once nothing of theirs is set up: every mount below is undone
        first, and the removal never crosses a mount."""
        desired = self.desired.uids()
        for uid in self.actual.uids() - desired:
            if not wanted(uid) and uid not in self._released:
                log.info("volumes of an unknown pod released pod_uid=%s", uid)
                self._released.add(uid)
                self._wake.set()
        # One readdir of a local directory, in the loop: a hand-off to a worker thread cost more than the listing
        # (every 2 s on every node; at 1,000 emulated nodes the hand-offs were a sixth of the loop's samples). The
        # removal of an orphan, which may unmount, still goes to a thread.
        try:
            listed = os.listdir(self.dirs.pods_dir)
        except FileNotFoundError:
            listed = []
        for uid in listed:
            busy = self.actual.for_pod(uid) or any(key[0] == uid for key in self._in_flight)
            if busy or uid in desired or uid in self._removing or wanted(uid):
                continue
            self._removing.add(uid)
            try:
                await asyncio.to_thread(self._remove_pod_dir, uid)
                log.info("orphaned pod directory removed pod_uid=%s", uid)
            except (OSError, MountError) as exc:
                log.warning("orphaned pod directory not removed pod_uid=%s error=%s", uid, exc)
            finally:
                self._removing.discard(uid)
        self._released &= self.actual.uids() | {k[0] for k in self._in_flight}

    # --- operations ----------------------------------------------------------------------------------------

    async def _execute(self, op: Operation) -> None:
        try:
            if op.kind is OpKind.UNMOUNT:
                await self._tear_down(op)
            else:
                await self._set_up(op)
        except Exception:
            # A plugin bug must not stop the reconciler; the back-off retries.
            log.exception("volume operation failed op=%s pod_uid=%s volume=%s", op.kind.value, *op.key)
            self._backoff.failed(op.key, self._clock.monotonic())
        finally:
            self._in_flight.discard(op.key)
            self._wake.set()
            for watcher in list(self._watchers):
                watcher.set()

    async def _set_up(self, op: Operation) -> None:
        uid, name = op.key
        entry = self.desired.get(uid)
        if entry is None or name not in entry.volumes:
            return  # the pod went away meanwhile
        plugin = self._by_name[op.plugin]
        try:
            path = await plugin.set_up(entry.pod, entry.volumes[name].volume)
        except SetUpError as exc:
            delay = self._backoff.failed(op.key, self._clock.monotonic())
            message = event_message(exc, name)  # the step and the name upstream's event shows (CSI: MountDevice)
            log.warning("volume set up failed pod_uid=%s volume=%s retry_in=%.1fs error=%s", uid, name, delay, exc)
            self._events(entry.pod, "Warning", FAILED_MOUNT, message)
            if is_uncertain(exc):
                self.actual.add(MountedVolume(uid, name, plugin.name, "", plugin.read_only, uncertain=True))
            return
        self._backoff.succeeded(op.key)
        self.actual.add(MountedVolume(uid, name, plugin.name, path, plugin.read_only))
        self.desired.remount_done(op.key)
        if op.kind is OpKind.MOUNT:
            log.info("MountVolume.SetUp succeeded pod_uid=%s volume=%s plugin=%s", uid, name, plugin.name)

    async def _tear_down(self, op: Operation) -> None:
        uid, name = op.key
        plugin = self._by_name.get(op.plugin)
        try:
            await asyncio.to_thread(clean_subpaths, self._mounter, os.path.join(self.dirs.subpaths_dir(uid), name))
            if plugin is not None:
                await plugin.tear_down(uid, name)
        except (TearDownError, OSError, MountError) as exc:
            text = os_error_text(exc) if isinstance(exc, OSError) else str(exc)
            delay = self._backoff.failed(op.key, self._clock.monotonic())
            log.warning(
                "UnmountVolume.TearDown failed pod_uid=%s volume=%s retry_in=%.1fs error=%s", uid, name, delay, text
            )
            return
        self._backoff.succeeded(op.key)
        self.actual.remove(op.key)
        log.info("UnmountVolume.TearDown succeeded pod_uid=%s volume=%s plugin=%s", uid, name, op.plugin)

    # --- helpers -------------------------------------------------------------------------------------------

    def _lookup(self, volume: Mapping[str, Any]) -> PluginInfo:
        plugin = find_plugin(self._plugins, volume)
        return PluginInfo(plugin.name, plugin.requires_remount)

    def make_pod_dirs(self, uid: str) -> None:
        """As upstream's makePodDataDirs: the pod directory, its volumes and plugins directories, 0750. Raises
        OSError (a full root dir: ENOSPC)."""
        for path in (self.dirs.pod_dir(uid), self.dirs.volumes_dir(uid), os.path.join(self.dirs.pod_dir(uid), PLUGINS)):
            make_dir(path, 0o750)

    def _remove_pod_dir(self, uid: str) -> None:
        path = os.path.realpath(self.dirs.pod_dir(uid))
        for mount in mounts_under(self._mounter.mounts(), path):
            self._mounter.unmount(mount.mount_point)
        remove_all_one_filesystem(path, self._mounter)

    def _wait_message(self, uid: str, expected: Sequence[str], reason: str) -> str:
        unmounted = [n for n in expected if (uid, n) not in self.actual]
        not_processed = [n for n in expected if not self.desired.wants((uid, n))]
        return (
            f"unmounted volumes={go_list(unmounted)}, unattached volumes=[], "
            f"failed to process volumes={go_list(not_processed)}: {reason}"
        )

    async def _wait_change(self, seconds: float) -> None:
        event = asyncio.Event()
        self._watchers.add(event)
        try:
            await self._sleep_or(event, seconds)
        finally:
            self._watchers.discard(event)

    async def _sleep_or(self, event: asyncio.Event, seconds: float) -> None:
        if event.is_set():
            return
        sleeper = asyncio.ensure_future(self._clock.sleep(seconds))
        waiter = asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait({sleeper, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            waiter.cancel()
