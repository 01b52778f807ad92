"""The volume manager as the agent runs it: real mounts, the node's API credential for objects and tokens, the
upstream layout under --root-dir."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from nodeagent.clock import Clock
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.volume import VolumeHost, new_plugins
from nodeagent.volume.csi import (
    CSIPlugin,
    DriverClients,
    DriverRegistry,
    NoDrivers,
    claim_status_patcher,
    cluster_getter,
    connect_node,
)
from nodeagent.volume.layout import PodDirs
from nodeagent.volume.mounter import LinuxMounter, Mounter
from nodeagent.volume.objects import ObjectCache
from nodeagent.volume.plugin import ObjectGetter
from nodeagent.volume.token import TokenManager, TokenRequester
from nodeagent.volumemanager.manager import EventSink, VolumeManager


def token_requester(client: KubeClient) -> TokenRequester:
    async def request(namespace: str, service_account: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        path = paths.api_path("serviceaccounts", namespace=namespace, name=service_account, subresource="token")
        return await client.create(path, dict(body))

    return request


def new_volume_manager(
    root_dir: str,
    *,
    client: KubeClient | None,
    get_object: ObjectGetter | None,
    node_allocatable: Mapping[str, str],
    memory_capacity: int,
    clock: Clock,
    events: EventSink,
    node_name: str = "",
    csi_drivers: DriverRegistry | None = None,
    mounter: Mounter | None = None,
) -> VolumeManager:
    """`mounter`: how volumes are mounted (default: mount(2) on this host)."""
    # Real paths: the mount table lists them so, and a symlink in --root-dir must not hide a mount from the checks.
    dirs = PodDirs(os.path.realpath(root_dir))
    mounter = mounter if mounter is not None else LinuxMounter()
    objects = ObjectCache(get_object, now=time.monotonic).get if get_object is not None else None
    host = VolumeHost(dirs, mounter, dict(node_allocatable), memory_capacity, get_object=objects)
    tokens = TokenManager(token_requester(client) if client is not None else None, now=time.time)
    plugins = new_plugins(host, tokens)
    if client is not None:
        # kubernetes.io/csi needs the API (claims, PVs, CSIDrivers); `csi_drivers` is the plugin manager's registry.
        clients = DriverClients(csi_drivers or NoDrivers(), connect_node)
        plugins.append(
            CSIPlugin(
                host,
                clients,
                get=cluster_getter(client),
                node_name=node_name,
                clock=clock,
                tokens=tokens,
                patch_claim_status=claim_status_patcher(client),
                events=events,
            )
        )
    return VolumeManager(plugins, dirs=dirs, mounter=mounter, clock=clock, events=events, tokens=tokens)
