"""What the watcher hands a registering plugin to: one handler per plugin type (upstream's cache.PluginHandler)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

# Plugin types of pluginregistration v1 (upstream's constants.go).
CSI_PLUGIN = "CSIPlugin"
DEVICE_PLUGIN = "DevicePlugin"
DRA_PLUGIN = "DRAPlugin"


class HandlerError(Exception):
    """A handler refuses or fails a plugin; the message goes to the plugin in its registration status."""


class PluginHandler(Protocol):
    async def validate_plugin(self, name: str, endpoint: str, versions: Sequence[str]) -> None:
        """Raise HandlerError when the plugin cannot be registered (nothing is changed yet)."""

    async def register_plugin(self, name: str, endpoint: str, versions: Sequence[str]) -> None:
        """Register a validated plugin; raise HandlerError when that fails."""

    async def deregister_plugin(self, name: str, endpoint: str) -> None:
        """The plugin's socket went away (or was recreated): forget it. Never raises."""
