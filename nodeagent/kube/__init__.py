"""A small typed asyncio client of the Kubernetes API: requests as data, one httpx seam, a reflector.

    async with KubeClient.from_kubeconfig(path) as client:
        node = await client.get(paths.node(name))

Objects are plain JSON dicts (`Obj`): the agent builds and patches them itself.
"""

from __future__ import annotations

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import (
    AlreadyExists,
    ApiError,
    ApiUnavailable,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeconfigError,
    KubeError,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
)
from nodeagent.kube.informer import Added, Backoff, Deleted, Modified, ReflectorEvent, Synced, list_and_watch
from nodeagent.kube.kubeconfig import ClusterCredentials, load_kubeconfig, ssl_context
from nodeagent.kube.request import ApiRequest, Obj, PatchType
from nodeagent.kube.watch import EventType, WatchEvent

__all__ = [
    "Added",
    "AlreadyExists",
    "ApiError",
    "ApiRequest",
    "ApiUnavailable",
    "Backoff",
    "ClusterCredentials",
    "Conflict",
    "Deleted",
    "EventType",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubeClient",
    "KubeError",
    "KubeconfigError",
    "Modified",
    "NotFound",
    "Obj",
    "PatchType",
    "ReflectorEvent",
    "ServerError",
    "Synced",
    "TooManyRequests",
    "Unauthorized",
    "WatchEvent",
    "list_and_watch",
    "load_kubeconfig",
    "paths",
    "ssl_context",
]
