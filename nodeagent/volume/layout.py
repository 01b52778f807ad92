"""The upstream on-disk layout under the agent's root dir (upstream kubelet_getters.go), so tools and people find
what they know:

    <root>/pods/<uid>/volumes/kubernetes.io~<plugin>/<volume>     what a plugin sets up
    <root>/pods/<uid>/plugins/kubernetes.io~<plugin>/<volume>     a plugin's own metadata (emptyDir's ready file)
    <root>/pods/<uid>/volume-subpaths/<volume>/<container>/<index> subPath bind mounts
    <root>/pods/<uid>/etc-hosts                                   the kubelet-managed /etc/hosts (kuberuntime.etc_hosts)
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

EMPTY_DIR = "kubernetes.io/empty-dir"
HOST_PATH = "kubernetes.io/host-path"
CONFIG_MAP = "kubernetes.io/configmap"
SECRET = "kubernetes.io/secret"
DOWNWARD_API = "kubernetes.io/downward-api"
PROJECTED = "kubernetes.io/projected"

VOLUMES = "volumes"
PLUGINS = "plugins"
VOLUME_SUBPATHS = "volume-subpaths"
ETC_HOSTS = "etc-hosts"


def escape_qualified_name(name: str) -> str:
    """`kubernetes.io/configmap` → `kubernetes.io~configmap` (upstream utilstrings.EscapeQualifiedName)."""
    return name.replace("/", "~")


def unescape_qualified_name(name: str) -> str:
    return name.replace("~", "/")


@dataclass(frozen=True)
class PodDirs:
    root_dir: str

    @property
    def pods_dir(self) -> str:
        return posixpath.join(self.root_dir, "pods")

    def pod_dir(self, uid: str) -> str:
        return posixpath.join(self.pods_dir, uid)

    def volumes_dir(self, uid: str) -> str:
        return posixpath.join(self.pod_dir(uid), VOLUMES)

    def plugin_volumes_dir(self, uid: str, plugin: str) -> str:
        return posixpath.join(self.volumes_dir(uid), escape_qualified_name(plugin))

    def volume_dir(self, uid: str, plugin: str, name: str) -> str:
        return posixpath.join(self.plugin_volumes_dir(uid, plugin), name)

    def plugin_dir(self, uid: str, plugin: str) -> str:
        return posixpath.join(self.pod_dir(uid), PLUGINS, escape_qualified_name(plugin))

    def subpaths_dir(self, uid: str) -> str:
        return posixpath.join(self.pod_dir(uid), VOLUME_SUBPATHS)

    def etc_hosts(self, uid: str) -> str:
        return posixpath.join(self.pod_dir(uid), ETC_HOSTS)

    def subpath_target(self, uid: str, volume: str, container: str, index: int) -> str:
        # A container name is a DNS label and a volume name too: both are safe as directory names.
        return posixpath.join(self.subpaths_dir(uid), volume, container, str(index))
