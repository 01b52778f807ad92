"""The plugin manager as the agent runs it: the watcher on `<rootDir>/plugins_registry` with the CSI handler (and
the DRA manager's DRAPlugin handler, passed in).

At start, as upstream's CSI plugin Init: wait for the apiserver and make sure this node's CSINode exists (with no
drivers), retried until it works (`ensure_csinode`, started before the node registers, as upstream starts it from
NewMainKubelet). Until the CSINode exists the storage state says "CSINode is not yet initialized", which keeps the
node NotReady (upstream's SetKubeletError from initializeCSINode): the Node the agent creates says it too. The
watcher (`run`) starts once the node is registered; drivers register meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import os

from csi.registration.handler import CSI_PLUGIN, PluginHandler
from csi.registration.watcher import PluginWatcher
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import KubeError
from nodeagent.pluginmanager.csihandler import CSIRegistrationHandler, NodeInfoGetter, node_get_info
from nodeagent.pluginmanager.nodeinfo import NodeInfoError, NodeInfoManager
from nodeagent.pluginmanager.registry import CSIDriverRegistry

log = logging.getLogger(__name__)

PLUGINS_REGISTRY_DIR = "plugins_registry"
CSINODE_RETRY = 1.0  # upstream's waitForAPIServerForever polls every second
CSINODE_NOT_INITIALIZED = "CSINode is not yet initialized"


class StorageState:
    """The storage part of the node's readiness (upstream's runtimeState storage error): an error until the
    node's CSINode is made, then none."""

    def __init__(self) -> None:
        self._error: str | None = CSINODE_NOT_INITIALIZED

    def error(self) -> str | None:
        return self._error

    def initialized(self) -> None:
        self._error = None


def plugins_registry_dir(root_dir: str) -> str:
    return os.path.join(root_dir, PLUGINS_REGISTRY_DIR)


class PluginManager:
    def __init__(
        self,
        root_dir: str,
        client: KubeClient,
        node_name: str,
        *,
        registry: CSIDriverRegistry | None = None,
        get_info: NodeInfoGetter = node_get_info,
    ) -> None:
        self.storage = StorageState()
        self.registry = registry or CSIDriverRegistry()
        self.node_info = NodeInfoManager(client, node_name)
        self.watcher = PluginWatcher(plugins_registry_dir(root_dir))
        self.watcher.add_handler(CSI_PLUGIN, CSIRegistrationHandler(self.registry, self.node_info, get_info))

    def add_handler(self, plugin_type: str, handler: PluginHandler) -> None:
        """Another plugin type's handler (DRAPlugin: the DRA manager's plugin store) on the same watcher, as
        upstream; before `run`."""
        self.watcher.add_handler(plugin_type, handler)

    async def ensure_csinode(self) -> None:
        while True:
            try:
                await self.node_info.initialize_csinode()
                self.storage.initialized()
                log.info("CSINode ready")
                return
            except (NodeInfoError, KubeError) as exc:
                log.warning("CSINode not ready, retrying error=%s", exc)
            await asyncio.sleep(CSINODE_RETRY)

    async def run(self) -> None:
        """The watcher, until cancelled."""
        log.info("Starting Kubelet Plugin Manager path=%s", self.watcher.path)
        await self.watcher.run()
