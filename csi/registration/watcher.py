"""The plugin watcher: plugin sockets under `<rootDir>/plugins_registry` registered and deregistered with handlers.

Upstream's plugin manager in one asyncio task (pluginwatcher + reconciler + operation executor):

- the directory is created (0755) and watched with inotify (`inotify.Inotify`), each subdirectory too, as upstream
  does; the watches are in place before the first scan. Names starting with "." and anything that is not a unix
  socket are ignored; a symbolic link to a socket counts as a socket (the socket itself may be anywhere), as
  upstream's os.Stat;
- on every change, and every `resync` seconds (upstream's reconciler loop period, 1 s), the directory is scanned and
  the desired state updated (`reconcile.update_desired`): a socket that appears, or is created again (a create
  event, or a new inode when the removal and the creation fell between two scans), gets a new generation;
- `reconcile.plan` then says what to start: deregistrations of sockets gone or recreated first, then registrations;
  each runs as its own task (one per socket path at a time), `operations.register` / `operations.deregister`;
- a failed registration is retried with upstream's exponential backoff (500 ms doubling to 2 m 2 s).

The watcher knows nothing of what a plugin is for: handlers by plugin type (`handler.PluginHandler`) do that. Scans
happen on the event loop: the registry holds a handful of sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import time
from collections.abc import Callable, Mapping
from typing import Any

from csi.registration import operations
from csi.registration.handler import PluginHandler
from csi.registration.inotify import IN_CREATE, IN_DELETE_SELF, IN_ISDIR, IN_MOVE_SELF, IN_MOVED_TO, Inotify
from csi.registration.reconcile import (
    Backoff,
    Deregister,
    DesiredPlugin,
    Identity,
    Register,
    RegisteredPlugin,
    Scan,
    failed,
    plan,
    update_desired,
)

log = logging.getLogger(__name__)

RESYNC = 1.0


def scan_sockets(root: str) -> Scan:
    """Every unix socket under `root` (recursively), skipping names that start with "." as upstream."""
    sockets: dict[str, Identity] = {}
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = [name for name in subdirectories if not name.startswith(".")]
        for name in files:
            if name.startswith("."):
                continue
            path = os.path.join(directory, name)
            try:
                # Followed, as upstream's IsUnixDomainSocket (os.Stat): a symlink here to a socket elsewhere is a
                # plugin, dialed through the link.
                info = os.stat(path)
            except OSError:
                continue  # gone since the listing, or a dangling link
            if stat.S_ISSOCK(info.st_mode):
                sockets[path] = (info.st_dev, info.st_ino)
    return Scan(sockets)


class PluginWatcher:
    def __init__(
        self,
        path: str,
        *,
        handlers: Mapping[str, PluginHandler] | None = None,
        resync: float = RESYNC,
        clock: Callable[[], float] = time.monotonic,
        dial_timeout: float = operations.DIAL_TIMEOUT,
    ) -> None:
        self.path = path
        self._handlers: dict[str, PluginHandler] = dict(handlers or {})
        self._resync = resync
        self._clock = clock
        self._inotify: Inotify | None = None
        self._dial_timeout = dial_timeout
        self._desired: dict[str, DesiredPlugin] = {}
        self._identities: dict[str, Identity] = {}
        self._generation = 1
        self._created: set[str] = set()
        self._actual: dict[str, RegisteredPlugin] = {}
        self._backoffs: dict[str, Backoff] = {}
        self._busy: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self.reconciles = 0  # completed reconciles
        self.reconciled = asyncio.Event()  # set after each reconcile, for tests that wait for some to pass

    def add_handler(self, plugin_type: str, handler: PluginHandler) -> None:
        self._handlers[plugin_type] = handler

    def registered(self) -> dict[str, RegisteredPlugin]:
        """Socket path -> the plugin registered from it (recorded before its handler's register completes)."""
        return dict(self._actual)

    async def run(self) -> None:
        """Runs until cancelled; when inotify fails, the periodic scan still sees every socket."""
        log.info("plugin watcher started path=%s", self.path)
        try:
            while True:
                self._wake.clear()
                if self._inotify is None:
                    self._watch()
                self.reconcile()
                # asyncio.timeout, not wait_for: 3.11's wait_for loses a cancel that races with the wake-up.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._resync):
                        await self._wake.wait()
        finally:
            self._unwatch()
            running = list(self._busy.values())
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            log.info("plugin watcher stopped path=%s", self.path)

    def _watch(self) -> None:
        """(Re-)create the directory and watch it and its subdirectories (upstream's init and traversePluginDir)."""
        try:
            os.makedirs(self.path, mode=0o755, exist_ok=True)
            self._inotify = Inotify(self._on_event)
            for directory, subdirectories, _ in os.walk(self.path):
                subdirectories[:] = [name for name in subdirectories if not name.startswith(".")]
                self._inotify.add(directory)
        except OSError as exc:
            log.warning("plugin registry not watched, scanning periodically path=%s error=%s", self.path, exc)
            self._unwatch()

    def _unwatch(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None

    def _on_event(self, path: str, mask: int) -> None:
        if path == self.path and mask & (IN_DELETE_SELF | IN_MOVE_SELF):
            # The directory itself went away: watch it again (re-created) on the next reconcile.
            log.warning("plugin registry removed, re-creating it path=%s", self.path)
            self._unwatch()
        elif mask & (IN_CREATE | IN_MOVED_TO) and not os.path.basename(path).startswith("."):
            if mask & IN_ISDIR and self._inotify is not None:
                try:
                    self._inotify.add(path)
                except OSError as exc:
                    log.warning("plugin registry subdirectory not watched path=%s error=%s", path, exc)
            else:
                self._created.add(path)
        self._wake.set()

    def reconcile(self) -> None:
        """Scan, update the desired state, and start what `plan` says (one step of upstream's reconciler loop)."""
        try:
            scan = scan_sockets(self.path)
        except OSError as exc:
            log.warning("plugin registry not readable path=%s error=%s", self.path, exc)
            scan = Scan({})
        created, self._created = self._created, set()
        self._desired, self._identities, self._generation = update_desired(
            self._desired, self._identities, scan, created, self._generation
        )
        now = self._clock()
        for action in plan(self._desired, self._actual, set(self._busy), self._backoffs, now):
            if isinstance(action, Register):
                self._start(action.plugin.socket_path, self._register(action.plugin))
            elif isinstance(action, Deregister):
                self._start(action.plugin.socket_path, self._deregister(action.plugin))
        self.reconciles += 1
        self.reconciled.set()

    def _start(self, socket_path: str, operation: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(operation, name=f"plugin-operation:{socket_path}")
        self._busy[socket_path] = task
        task.add_done_callback(lambda _: self._finished(socket_path, task))

    def _finished(self, socket_path: str, task: asyncio.Task[None]) -> None:
        if self._busy.get(socket_path) is task:
            del self._busy[socket_path]
        self._wake.set()

    def _record(self, plugin: RegisteredPlugin) -> None:
        self._actual[plugin.socket_path] = plugin

    def _forget(self, socket_path: str) -> None:
        self._actual.pop(socket_path, None)

    async def _register(self, plugin: DesiredPlugin) -> None:
        log.info("registering plugin socket=%s generation=%d", plugin.socket_path, plugin.generation)
        try:
            registered = await operations.register(
                plugin, self._handlers, self._record, dial_timeout=self._dial_timeout
            )
        except asyncio.CancelledError:
            raise
        except operations.RegistrationError as exc:
            self._failed(plugin.socket_path, exc)
            return
        except Exception as exc:
            log.exception("plugin registration crashed socket=%s", plugin.socket_path)
            self._failed(plugin.socket_path, exc)
            return
        self._backoffs.pop(plugin.socket_path, None)
        log.info(
            "plugin registered socket=%s type=%s name=%s endpoint=%s",
            plugin.socket_path,
            registered.plugin_type,
            registered.name,
            registered.endpoint,
        )

    def _failed(self, socket_path: str, exc: Exception) -> None:
        backoff = failed(self._backoffs.get(socket_path), self._clock())
        self._backoffs[socket_path] = backoff
        log.error("plugin registration failed socket=%s retry_after=%.1fs error=%s", socket_path, backoff.duration, exc)

    async def _deregister(self, plugin: RegisteredPlugin) -> None:
        log.info("deregistering plugin socket=%s type=%s name=%s", plugin.socket_path, plugin.plugin_type, plugin.name)
        try:
            await operations.deregister(plugin, self._handlers.get(plugin.plugin_type), self._forget)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("plugin deregistration failed socket=%s", plugin.socket_path)
            self._failed(plugin.socket_path, exc)
            return
        self._backoffs.pop(plugin.socket_path, None)
