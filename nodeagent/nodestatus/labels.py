"""The well-known labels the kubelet puts on its Node at registration (kubelet_node_status.go initialNode)."""

from __future__ import annotations

LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_OS = "kubernetes.io/os"
LABEL_ARCH = "kubernetes.io/arch"
# Deprecated since 1.14, yet the kubelet still sets them and some workloads still select on them.
LABEL_BETA_OS = "beta.kubernetes.io/os"
LABEL_BETA_ARCH = "beta.kubernetes.io/arch"


def node_labels(node_name: str, os: str, arch: str, *, hostname: str | None = None) -> dict[str, str]:
    """kubernetes.io/hostname (the hostname, which is the node name unless overridden), os and arch, stable and beta."""
    return {
        LABEL_HOSTNAME: hostname if hostname is not None else node_name,
        LABEL_OS: os,
        LABEL_ARCH: arch,
        LABEL_BETA_OS: os,
        LABEL_BETA_ARCH: arch,
    }
