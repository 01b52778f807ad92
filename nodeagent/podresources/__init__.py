"""The PodResources API v1 the kubelet serves to node agents (upstream pkg/kubelet/apis/podresources)."""

from nodeagent.podresources.server import PodResourcesServer

__all__ = ["PodResourcesServer"]
