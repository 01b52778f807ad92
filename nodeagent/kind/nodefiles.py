"""The files a kind node image carries besides its Debian packages, written here from what kind documents a node
needs (kind's own files are not copied): containerd's configuration, the kubelet's unit, kubeadm's drop-in, the
`kubelet.slice` that kind's KubeletConfiguration (`cgroupRoot: /kubelet`) names, the entrypoint, `/kind/version`,
and the map from the project's control-plane images to the `registry.k8s.io` names kubeadm pulls.

What kind relies on in a node image (kind v0.33.0's Go code):
- `cat /kind/version` gives the Kubernetes version (it picks the kubeadm config API and the cgroup driver from it:
  `systemd` from v1.24 on);
- `kubeadm`, `kubelet`, `kubectl` on PATH, containerd's CRI at /run/containerd/containerd.sock;
- the images kubeadm runs already in containerd's `k8s.io` namespace (kind skips kubeadm's preflight, so nothing
  is pulled);
- `/kind/manifests/default-storage.yaml` optionally (kind falls back to its own manifest when it is missing);
- systemd as the container's init, stopped by SIGRTMIN+3.

Pure text: nodeimage.py puts these into the image.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from nodeagent.testbed.controlplaneimages import KUBERNETES_IMAGES
from nodeagent.testbed.versions import KUBERNETES_VERSION

REGISTRY = "registry.k8s.io"
# kubeadm v1.34.4's `config images list` (constants.go): the tags it looks for in the CRI.
PAUSE_TAG = "3.10.1"
ETCD_TAG = "3.6.5-0"
# The local name of the etcd image (nodeimage.py preloads the project's etcd v3.6.4 under ETCD_TAG).
ETCD_IMAGE = "etcd"
COREDNS_REPOSITORY = "coredns/coredns"
COREDNS_TAG = "v1.12.1"
SANDBOX_IMAGE = f"{REGISTRY}/pause:{PAUSE_TAG}"
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
# Debian's containernetworking-plugins install here; kind's convention (and nodeagent's) is /opt/cni/bin.
DEBIAN_CNI_DIR = "/usr/lib/cni"
CNI_BIN_DIR = "/opt/cni/bin"
ENTRYPOINT = "/usr/local/bin/entrypoint"
# capability(7) number; this project's machines lack it in their bounding set (docs/kind.md).
CAP_SYS_RESOURCE = 24
# systemd's clean shutdown signal: kind's `docker stop` of a node must reach systemd with it.
STOP_SIGNAL = "SIGRTMIN+3"
KUBE_BIN_DIR = "/usr/bin"


@dataclass(frozen=True)
class ImageName:
    """One of the project's control-plane images (controlplaneimages.py's name) and the name kubeadm expects."""

    local: str
    upstream: str


def upstream_image_names(version: str = KUBERNETES_VERSION) -> list[ImageName]:
    """Every image kubeadm `version` runs, under the names `kubeadm config images list` prints."""
    names = [ImageName(name, f"{REGISTRY}/{name}:{version}") for name in KUBERNETES_IMAGES]
    names.append(ImageName(ETCD_IMAGE, f"{REGISTRY}/etcd:{ETCD_TAG}"))
    names.append(ImageName("coredns", f"{REGISTRY}/{COREDNS_REPOSITORY}:{COREDNS_TAG}"))
    names.append(ImageName("pause", SANDBOX_IMAGE))
    return names


def containerd_config(
    *, systemd_cgroup: bool, snapshotter: str = "overlayfs", restrict_oom_score_adj: bool = False
) -> str:
    """containerd 1.6's config (version 2) for a kind node: the CRI plugin on its default socket, runc v2 with the
    node's cgroup driver (`SystemdCgroup`, true for kind's `cgroupDriver: systemd`), the pause image kubeadm
    expects as the sandbox image, and the CNI directories. `restrict_oom_score_adj` clamps what pods ask for to
    containerd's own score: the entrypoint turns it on when the node lacks CAP_SYS_RESOURCE (this project's
    machines), without which runc cannot lower a sandbox's score to -998 ("failed to update
    /proc/self/oom_score_adj: Permission denied", seen as "can't get final child's PID from pipe")."""
    return (
        "version = 2\n"
        "[grpc]\n"
        f'  address = "{CONTAINERD_SOCKET}"\n'
        '[plugins."io.containerd.grpc.v1.cri"]\n'
        f'  sandbox_image = "{SANDBOX_IMAGE}"\n'
        f"  restrict_oom_score_adj = {'true' if restrict_oom_score_adj else 'false'}\n"
        '[plugins."io.containerd.grpc.v1.cri".containerd]\n'
        f'  snapshotter = "{snapshotter}"\n'
        '  default_runtime_name = "runc"\n'
        "  discard_unpacked_layers = false\n"
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
        '  runtime_type = "io.containerd.runc.v2"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
        f"  SystemdCgroup = {'true' if systemd_cgroup else 'false'}\n"
        '[plugins."io.containerd.grpc.v1.cri".cni]\n'
        f'  bin_dir = "{CNI_BIN_DIR}"\n'
        '  conf_dir = "/etc/cni/net.d"\n'
    )


def kubelet_service() -> str:
    """The base unit: the kubelet restarts until kubeadm has written its configuration (as upstream's packages)."""
    return (
        "[Unit]\n"
        "Description=kubelet: the Kubernetes node agent\n"
        "Wants=containerd.service\n"
        "After=containerd.service\n"
        "[Service]\n"
        f"ExecStart={KUBE_BIN_DIR}/kubelet\n"
        "Slice=kubelet.slice\n"
        "Restart=always\n"
        "RestartSec=1s\n"
        "StartLimitInterval=0\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def kubelet_cgroup_root_script() -> str:
    """Run before the kubelet: on cgroup v1, make `kubelet.slice` in every mounted v1 hierarchy (a directory with
    `cgroup.procs`; Docker also leaves empty directories for hierarchies the host does not mount, such as
    `cpu,cpuacct` where cpu and cpuacct are mounted apart), since systemd realises a slice only in the hierarchies
    of the accounting it enables and the kubelet checks its cgroup root in each. cpuset needs its cpus and mems
    copied from the parent before anything can join it. Nothing to do on cgroup v2."""
    lines = [
        "#!/bin/sh",
        "set -eu",
        "[ -f /sys/fs/cgroup/cgroup.controllers ] && exit 0",
        "for d in /sys/fs/cgroup/*/; do",
        '  d="${d%/}"',
        '  [ "$d" = /sys/fs/cgroup/unified ] && continue',
        '  [ -f "$d/cgroup.procs" ] || continue',
        '  mkdir -p "$d/kubelet.slice"',
        "done",
        "c=/sys/fs/cgroup/cpuset",
        'if [ -d "$c/kubelet.slice" ]; then',
        '  [ -n "$(cat "$c/kubelet.slice/cpuset.cpus")" ] || cat "$c/cpuset.cpus" > "$c/kubelet.slice/cpuset.cpus"',
        '  [ -n "$(cat "$c/kubelet.slice/cpuset.mems")" ] || cat "$c/cpuset.mems" > "$c/kubelet.slice/cpuset.mems"',
        "fi",
    ]
    return "\n".join(lines) + "\n"


KUBELET_CGROUP_ROOT_SCRIPT = "/usr/local/bin/kubelet-cgroup-root"


def kubeadm_dropin() -> str:
    """kubeadm's drop-in (its documented `10-kubeadm.conf`): the flags kubeadm writes, then the user's."""
    return (
        "[Service]\n"
        'Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf '
        '--kubeconfig=/etc/kubernetes/kubelet.conf"\n'
        'Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"\n'
        "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env\n"
        "EnvironmentFile=-/etc/default/kubelet\n"
        f"ExecStartPre={KUBELET_CGROUP_ROOT_SCRIPT}\n"
        "ExecStart=\n"
        f"ExecStart={KUBE_BIN_DIR}/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS "
        "$KUBELET_EXTRA_ARGS\n"
    )


def kubelet_slice() -> str:
    """The slice for kind's `cgroupRoot: /kubelet` (the systemd driver names it kubelet.slice)."""
    return (
        "[Unit]\n"
        "Description=the kubelet and its pods (cgroupRoot /kubelet)\n"
        "Before=slices.target\n"
        "[Slice]\n"
        "CPUAccounting=true\n"
        "MemoryAccounting=true\n"
        "TasksAccounting=true\n"
        "IOAccounting=true\n"
    )


def entrypoint_script() -> str:
    """The node container's entrypoint: make the root mount shared (the kubelet's volume mounts must propagate into
    containers), give the node a machine id of its own, pick containerd's snapshotter (overlayfs when the /var
    volume takes an overlay mount, `native` otherwise), restrict pods' OOM scores when the node lacks
    CAP_SYS_RESOURCE (see containerd_config), point the node's resolv.conf at its own address, forwarded to Docker's
    embedded resolver, then exec systemd."""
    return (
        "#!/bin/sh\n"
        "set -eu\n"
        'log() { echo "nodeagent-kind-entrypoint: $*" >&2; }\n'
        "mount --make-rshared /\n"
        "if [ ! -s /etc/machine-id ]; then\n"
        "  systemd-machine-id-setup >/dev/null 2>&1 || cat /proc/sys/kernel/random/uuid | tr -d - > /etc/machine-id\n"
        "fi\n"
        "probe=/var/lib/containerd/.overlay-probe\n"
        'mkdir -p "$probe/l" "$probe/u" "$probe/w" "$probe/m"\n'
        'if mount -t overlay overlay -o "lowerdir=$probe/l,upperdir=$probe/u,workdir=$probe/w" "$probe/m" '
        "2>/dev/null; then\n"
        '  umount "$probe/m"\n'
        '  log "snapshotter=overlayfs"\n'
        "else\n"
        "  sed -i 's/^  snapshotter = .*/  snapshotter = \"native\"/' /etc/containerd/config.toml\n"
        '  log "snapshotter=native (no overlay mount on /var)"\n'
        "fi\n"
        'rm -rf "$probe"\n'
        "bounding=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)\n"
        f"if [ $(( (0x$bounding >> {CAP_SYS_RESOURCE}) & 1 )) -eq 0 ]; then\n"
        "  sed -i 's/^  restrict_oom_score_adj = .*/  restrict_oom_score_adj = true/' /etc/containerd/config.toml\n"
        '  log "restrict_oom_score_adj=true (no CAP_SYS_RESOURCE in the bounding set)"\n'
        "fi\n"
        # Docker's embedded resolver listens on 127.0.0.11 (DNAT to two random ports, in the node's own netns). A pod
        # cannot reach a loopback address, and CoreDNS, forwarding to it from the pod's netns, would reach itself
        # (plugin/loop, FATAL). So the node's resolv.conf names the node's own address, DNATed to the resolver's
        # ports for the node (OUTPUT) and its pods (PREROUTING; route_localnet lets them reach 127.0.0.11).
        "node_ip=$(ip -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1 | head -n 1)\n"
        "nat=$(iptables-save -t nat)\n"
        'port_of() { echo "$nat" | grep -- \'-d 127.0.0.11/32\' | grep -- "-p $1" '
        "| grep -o 'to-destination 127.0.0.11:[0-9]*' | cut -d: -f2 | head -n 1; }\n"
        "udp=$(port_of udp); tcp=$(port_of tcp)\n"
        'if [ -n "$node_ip" ] && [ -n "$udp" ] && [ -n "$tcp" ] '
        '&& grep -q "^nameserver 127.0.0.11" /etc/resolv.conf; then\n'
        "  sysctl -qw net.ipv4.conf.all.route_localnet=1\n"
        "  for chain in OUTPUT PREROUTING; do\n"
        '    iptables -t nat -A "$chain" -d "$node_ip" -p udp --dport 53 -j DNAT --to-destination "127.0.0.11:$udp"\n'
        '    iptables -t nat -A "$chain" -d "$node_ip" -p tcp --dport 53 -j DNAT --to-destination "127.0.0.11:$tcp"\n'
        "  done\n"
        '  resolv=$(sed "s/^nameserver 127.0.0.11$/nameserver $node_ip/" /etc/resolv.conf)\n'
        '  echo "$resolv" > /etc/resolv.conf\n'
        '  log "resolver: $node_ip:53 -> 127.0.0.11 (udp $udp, tcp $tcp)"\n'
        "else\n"
        '  log "resolver: left as is (node_ip=$node_ip udp=$udp tcp=$tcp)"\n'
        "fi\n"
        'log "exec $*"\n'
        'exec "$@"\n'
    )


def image_labels(version: str, inputs_digest: str) -> Mapping[str, str]:
    return {
        "io.nodeagent.kind.kubernetes-version": version,
        "io.nodeagent.kind.inputs": inputs_digest,
    }


def commit_changes(labels: Mapping[str, str]) -> list[str]:
    """`docker commit --change` instructions that make a plain container a kind node image. dockerd 20.10 refuses
    STOPSIGNAL as a change: the build container is run with `--stop-signal` (STOP_SIGNAL) instead, and commit keeps
    the container's own config."""
    changes = [
        f'ENTRYPOINT ["{ENTRYPOINT}", "/sbin/init"]',
        "CMD []",
        "ENV container=docker",
    ]
    changes += [f'LABEL {key}="{value}"' for key, value in sorted(labels.items())]
    return changes
