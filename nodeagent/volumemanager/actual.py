"""The actual state of the world (upstream volumemanager/cache/actual_state_of_world.go): what is set up, by
(pod UID, volume name), and its reconstruction from disk at start (upstream reconciler's syncStates).

Reconstruction walks `<root>/pods/<uid>/volumes/<plugin>/<name>` and asks each plugin, from disk and the mount table
only, whether the volume is set up (a writer's `..data` present, a tmpfs still mounted). What it finds counts as
set up, so a restarted agent neither remounts nor waits for it; it is marked `reconstructed`, and set up once more
(idempotently) when its pod is synced, or torn down once housekeeping finds its pod gone.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from nodeagent.volume.layout import PodDirs, unescape_qualified_name
from nodeagent.volumemanager.desired import VolumeKey

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MountedVolume:
    pod_uid: str
    name: str
    plugin: str
    host_path: str
    read_only: bool
    reconstructed: bool = False
    #: a set up that failed with the volume maybe set up (upstream's uncertain mount: a CSI driver that timed out or
    #: went away mid-call): not mounted for the waits, set up again, and torn down when its pod goes.
    uncertain: bool = False

    @property
    def key(self) -> VolumeKey:
        return (self.pod_uid, self.name)


class ActualStateOfWorld:
    def __init__(self) -> None:
        self._volumes: dict[VolumeKey, MountedVolume] = {}

    def add(self, volume: MountedVolume) -> None:
        self._volumes[volume.key] = volume

    def remove(self, key: VolumeKey) -> None:
        self._volumes.pop(key, None)

    def get(self, key: VolumeKey) -> MountedVolume | None:
        return self._volumes.get(key)

    def __contains__(self, key: object) -> bool:
        """Set up (an uncertain volume is listed, and torn down, but not set up)."""
        if not isinstance(key, tuple):
            return False
        volume = self._volumes.get(key)
        return volume is not None and not volume.uncertain

    def __iter__(self) -> Iterator[MountedVolume]:
        return iter(list(self._volumes.values()))

    def for_pod(self, uid: str) -> list[MountedVolume]:
        return [v for v in self._volumes.values() if v.pod_uid == uid]

    def uids(self) -> set[str]:
        return {uid for uid, _ in self._volumes}


# (plugin name, pod UID, volume name) -> (host path, read_only) when the plugin finds it set up, else None.
Reconstructor = Callable[[str, str, str], tuple[str, bool] | None]


def reconstruct(dirs: PodDirs, find: Reconstructor) -> list[MountedVolume]:
    """Volumes set up before a restart, read from disk (blocking: run it in a thread)."""
    found: list[MountedVolume] = []
    try:
        uids = sorted(os.listdir(dirs.pods_dir))
    except FileNotFoundError:
        return found
    for uid in uids:
        volumes_dir = dirs.volumes_dir(uid)
        try:
            plugin_dirs = sorted(os.listdir(volumes_dir))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for plugin_dir in plugin_dirs:
            plugin = unescape_qualified_name(plugin_dir)
            try:
                names = sorted(os.listdir(os.path.join(volumes_dir, plugin_dir)))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for name in names:
                answer = find(plugin, uid, name)
                if answer is None:
                    log.info("volume found on disk but not set up pod_uid=%s plugin=%s volume=%s", uid, plugin, name)
                    continue
                found.append(MountedVolume(uid, name, plugin, answer[0], answer[1], reconstructed=True))
    return found
