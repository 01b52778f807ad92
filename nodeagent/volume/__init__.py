"""Volume plugins (upstream pkg/volume): one module per volume type behind the `VolumePlugin` Protocol, the
atomic writer, the subPath guard and the container mounts. The volume manager (`nodeagent.volumemanager`) decides
when each plugin runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodeagent.volume.configmap import ConfigMapPlugin
from nodeagent.volume.downwardapi import DownwardAPIPlugin
from nodeagent.volume.emptydir import EmptyDirPlugin
from nodeagent.volume.errors import SetUpError, TearDownError, UnsupportedVolumeError, VolumeError
from nodeagent.volume.hostpath import HostPathPlugin
from nodeagent.volume.plugin import Volume, VolumeHost, VolumePlugin, source_type
from nodeagent.volume.projected import ProjectedPlugin
from nodeagent.volume.secret import SecretPlugin
from nodeagent.volume.token import TokenManager

__all__ = [
    "SetUpError",
    "TearDownError",
    "UnsupportedVolumeError",
    "VolumeError",
    "VolumeHost",
    "VolumePlugin",
    "find_plugin",
    "new_plugins",
]


def new_plugins(host: VolumeHost, tokens: TokenManager) -> list[VolumePlugin]:
    return [
        EmptyDirPlugin(host),
        HostPathPlugin(),
        ConfigMapPlugin(host),
        SecretPlugin(host),
        DownwardAPIPlugin(host),
        ProjectedPlugin(host, tokens),
    ]


def find_plugin(plugins: Sequence[VolumePlugin], volume: Volume) -> VolumePlugin:
    """The plugin for `volume`; a type without one here (persistentVolumeClaim, ephemeral, csi, nfs ...) raises
    UnsupportedVolumeError, so the pod waits with a clear event instead of running without its volume."""
    for plugin in plugins:
        if plugin.can_support(volume):
            return plugin
    kind = source_type(volume) or "an unknown or empty source"
    raise UnsupportedVolumeError(f"{kind} volumes are not supported on this node (no volume plugin matched)")
