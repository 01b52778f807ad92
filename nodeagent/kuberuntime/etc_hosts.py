"""The kubelet-managed /etc/hosts (upstream kubelet_pods.go: shouldMountHostsFile, makeMounts, makeHostsMount,
ensureHostsFile, managedHostsFileContent, nodeHostsFileContent, hostsEntriesFromHostAliases).

As upstream:

- A pod's containers get `<rootDir>/pods/<uid>/etc-hosts` bind-mounted read-write at /etc/hosts once the pod has an
  IP (its sandbox is up) or when it uses the host network; not a container that mounts a volume at /etc/hosts itself
  (compared with the volumeMount's mountPath as written, as upstream does).
- Content, for a pod on the pod network: the "# Kubernetes-managed hosts file." header, the localhost and ip6 lines,
  then one line per pod IP: `<ip>\\t<hostname>.<domain>\\t<hostname>` when the pod has a subdomain (its domain is
  `<subdomain>.<ns>.svc.<clusterDomain>`), else `<ip>\\t<hostname>`. For a host-network pod: the
  "# Kubernetes-managed hosts file (host network)." header and the node's own /etc/hosts as it is. Both end with
  the pod's `hostAliases`: an empty line, "# Entries added by HostAliases." and one `<ip>\\t<name>\\t<name>...` line
  per alias, in the spec's order.
- The file is written (mode 0644 whatever the umask) each time a container is about to be created, in place, so the
  pod's running containers, which share the file, see the same content. Upstream's early "written once, if it does
  not exist" check was dead code (os.Stat never returns an IsExist error) and was dropped; the content depends only
  on the pod's immutable spec and its sandbox's IPs, so a rewrite gives the same bytes unless a container edited the
  file (then, as upstream, the edit is lost at the next container start of the pod) or the node's /etc/hosts
  changed (a host-network pod follows it).
- A failure (the node's /etc/hosts unreadable, the pod directory unwritable) fails the container's config with the
  Go error's text ("open /etc/hosts: no such file or directory"), which the runtime manager reports as
  CreateContainerConfigError.

The content builders are pure; `ensure_hosts_file` is the I/O (blocking: run it in a thread).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

from cri.v1 import api_pb2
from nodeagent.kuberuntime.errors import CreateContainerConfigError
from nodeagent.kuberuntime.sandbox_config import pod_hostname_and_domain
from nodeagent.volume.fsutil import os_error_text

ETC_HOSTS_PATH = "/etc/hosts"
HOSTS_FILE_MODE = 0o644
POD_DIR_MODE = 0o750
MANAGED_HOSTS_HEADER = "# Kubernetes-managed hosts file.\n"
MANAGED_HOSTS_HEADER_WITH_HOST_NETWORK = "# Kubernetes-managed hosts file (host network).\n"
HOST_ALIASES_HEADER = "# Entries added by HostAliases.\n"
_LOCALHOST_LINES = (
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::0\tip6-localnet\n"
    "fe00::0\tip6-mcastprefix\n"
    "fe00::1\tip6-allnodes\n"
    "fe00::2\tip6-allrouters\n"
)


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    out: Mapping[str, Any] = pod.get("spec") or {}
    return out


def should_mount_hosts_file(pod: Mapping[str, Any], pod_ips: Sequence[str]) -> bool:
    """Upstream shouldMountHostsFile (Linux): not before the pod has an IP, unless it uses the host network."""
    return bool(pod_ips) or bool(_spec(pod).get("hostNetwork"))


def mounts_own_hosts_file(container: Mapping[str, Any]) -> bool:
    """The container mounts a volume at /etc/hosts itself: the managed file stays out of its way."""
    return any(vm.get("mountPath") == ETC_HOSTS_PATH for vm in container.get("volumeMounts") or [])


def wants_hosts_mount(pod: Mapping[str, Any], container: Mapping[str, Any], pod_ips: Sequence[str]) -> bool:
    return should_mount_hosts_file(pod, pod_ips) and not mounts_own_hosts_file(container)


def hosts_entries_from_host_aliases(host_aliases: Sequence[Mapping[str, Any]]) -> str:
    if not host_aliases:
        return ""
    # One line per alias, all its names on it, in the spec's order.
    lines = (
        f"{alias.get('ip', '')}\t" + "\t".join(str(h) for h in alias.get("hostnames") or []) for alias in host_aliases
    )
    return "\n" + HOST_ALIASES_HEADER + "".join(line + "\n" for line in lines)


def managed_hosts_file_content(
    pod_ips: Sequence[str], hostname: str, domain: str, host_aliases: Sequence[Mapping[str, Any]]
) -> bytes:
    """The file of a pod on the pod network: every pod IP names the pod (upstream managedHostsFileContent)."""
    if domain:
        entries = "".join(f"{ip}\t{hostname}.{domain}\t{hostname}\n" for ip in pod_ips)
    else:
        entries = "".join(f"{ip}\t{hostname}\n" for ip in pod_ips)
    text = MANAGED_HOSTS_HEADER + _LOCALHOST_LINES + entries + hosts_entries_from_host_aliases(host_aliases)
    return text.encode()


def node_hosts_file_content(node_hosts: bytes, host_aliases: Sequence[Mapping[str, Any]]) -> bytes:
    """The file of a host-network pod: the node's own file, byte for byte, between the header and the aliases
    (upstream nodeHostsFileContent)."""
    return (
        MANAGED_HOSTS_HEADER_WITH_HOST_NETWORK.encode()
        + node_hosts
        + hosts_entries_from_host_aliases(host_aliases).encode()
    )


def hosts_file_content(
    pod: Mapping[str, Any], pod_ips: Sequence[str], *, cluster_domain: str, node_hosts: bytes | None
) -> bytes:
    """The pod's file; `node_hosts` is the node's /etc/hosts, read by the caller for a host-network pod only."""
    aliases: Sequence[Mapping[str, Any]] = _spec(pod).get("hostAliases") or []
    if _spec(pod).get("hostNetwork"):
        return node_hosts_file_content(node_hosts or b"", aliases)
    hostname, domain = pod_hostname_and_domain(pod, cluster_domain)
    return managed_hosts_file_content(pod_ips, hostname, domain, aliases)


# go-selinux's GetEnabled looks for selinuxfs; its `enforce` file is there whenever SELinux is on (any mode).
SELINUXFS_ENFORCE = "/sys/fs/selinux/enforce"


@functools.cache
def selinux_enabled() -> bool:
    return os.path.exists(SELINUXFS_ENFORCE)


def hosts_mount(host_path: str, *, selinux: bool | None = None) -> api_pb2.Mount:
    """Upstream makeHostsMount: read-write, relabelled for SELinux (containers share the file). As upstream's
    makeMounts, the relabel is asked for only where SELinux is enabled (`v.SELinuxRelabel && selinux.GetEnabled()`);
    `selinux` overrides the host's answer (tests)."""
    relabel = selinux_enabled() if selinux is None else selinux
    return api_pb2.Mount(container_path=ETC_HOSTS_PATH, host_path=host_path, readonly=False, selinux_relabel=relabel)


def ensure_hosts_file(
    path: str,
    pod: Mapping[str, Any],
    pod_ips: Sequence[str],
    *,
    cluster_domain: str,
    node_hosts_path: str = ETC_HOSTS_PATH,
) -> None:
    """Write the pod's file at `path` (upstream ensureHostsFile); raises CreateContainerConfigError with the Go
    error's text. Blocking."""
    node_hosts: bytes | None = None
    if _spec(pod).get("hostNetwork"):
        try:
            with open(node_hosts_path, "rb") as source:
                node_hosts = source.read()
        except OSError as exc:
            raise CreateContainerConfigError(os_error_text(exc, "open")) from exc
    content = hosts_file_content(pod, pod_ips, cluster_domain=cluster_domain, node_hosts=node_hosts)
    try:
        # The pod directory is the volume manager's (made before the volumes); made here too for a runtime manager
        # that runs without one.
        os.makedirs(os.path.dirname(path), mode=POD_DIR_MODE, exist_ok=True)
    except OSError as exc:
        raise CreateContainerConfigError(os_error_text(exc, "mkdir")) from exc
    try:
        # In place (truncate and write, as Go's os.WriteFile), so the containers already running keep sharing it.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, HOSTS_FILE_MODE)
    except OSError as exc:
        raise CreateContainerConfigError(os_error_text(exc, "open")) from exc
    try:
        with os.fdopen(fd, "wb") as target:
            target.write(content)
            os.fchmod(target.fileno(), HOSTS_FILE_MODE)  # whatever the umask made of it
    except OSError as exc:
        raise CreateContainerConfigError(f"write {path}: {os_error_text(exc)}") from exc
