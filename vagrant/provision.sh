#!/bin/sh
# Provisioning of the nodeagent VM (root, inside the VM; also run in a chroot by tests/unit/vm). Idempotent.
#
# The box already holds everything slow (containerd, runc, CNI plugins, a venv with nodeagent's dependencies, the
# pause and busybox images): this installs the nodeagent wheel built from the host's checkout (offline, --no-index),
# writes the KubeletConfiguration (staticPodPath /etc/kubernetes/manifests), containerd's and CNI's config, and the
# systemd units, then (when systemd runs) starts containerd and the agent, standalone.
set -eu
wheels=${1:-/vagrant/dist}
venv=/opt/nodeagent
# Pods in the VM get addresses from this range (198.18.0.0/15 is reserved for network testing); it never leaves
# the VM and differs from the management network, which `nodeagent vm network` picks in 198.18.0.0/16.
pod_cidr=${NODEAGENT_VM_POD_CIDR:-198.19.255.0/24}
pause_image=${NODEAGENT_VM_PAUSE_IMAGE:-nodeagent.local/pause:3.10}
# The kubelet's cgroupDriver, and containerd's runc option to match (as kubeadm's hosts: systemd, SystemdCgroup = true).
cgroup_driver=${NODEAGENT_VM_CGROUP_DRIVER:-cgroupfs}
case "$cgroup_driver" in
  cgroupfs) systemd_cgroup=false ;;
  systemd) systemd_cgroup=true ;;
  *)
    echo "provision: NODEAGENT_VM_CGROUP_DRIVER must be cgroupfs or systemd, not '$cgroup_driver'" >&2
    exit 1
    ;;
esac

set -- "$wheels"/nodeagent-*.whl
if [ ! -f "$1" ]; then
  echo "provision: no nodeagent wheel in $wheels (the Vagrantfile's trigger builds it on the host)" >&2
  exit 1
fi
# --no-deps: the box's venv has the dependencies; --force-reinstall: the same version with newer code.
"$venv/bin/pip" install --quiet --no-index --no-deps --force-reinstall "$1"
ln -sf "$venv/bin/nodeagent" /usr/local/bin/nodeagent

write() { # write PATH: stdin to PATH, only when it differs (so a second run changes nothing)
  tmp="$1.provision-tmp"
  cat >"$tmp"
  if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv "$tmp" "$1"; fi
}

containerd_before=$(cat /etc/containerd/config.toml 2>/dev/null || true)
install -d /etc/containerd /etc/cni/net.d /etc/kubernetes/manifests /var/lib/kubelet /var/lib/nodeagent-vm/images

write /etc/containerd/config.toml <<EOF_CONTAINERD
version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  # As on the testbed: lowering oom_score_adj may be refused on nested hosts.
  restrict_oom_score_adj = true
  enable_cdi = false

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = $systemd_cgroup

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "/etc/cni/net.d"
EOF_CONTAINERD

write /etc/cni/net.d/10-nodeagent.conflist <<EOF_CNI
{
  "cniVersion": "1.0.0",
  "name": "nodeagent-vm",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF_CNI

write /var/lib/kubelet/config.yaml <<EOF_CONFIG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
staticPodPath: /etc/kubernetes/manifests
cgroupDriver: $cgroup_driver
podCIDR: $pod_cidr
clusterDomain: cluster.local
address: 127.0.0.1
healthzBindAddress: 127.0.0.1
healthzPort: 10248
EOF_CONFIG

write /etc/crictl.yaml <<EOF_CRICTL
runtime-endpoint: unix:///run/containerd/containerd.sock
image-endpoint: unix:///run/containerd/containerd.sock
timeout: 30
EOF_CRICTL

# The images the box carries, imported once containerd runs (idempotent: an import of the same image is a no-op).
write /etc/systemd/system/nodeagent-images.service <<'EOF_IMAGES'
[Unit]
Description=Import the pause and busybox images of the nodeagent box into containerd
After=containerd.service
Requires=containerd.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'for tar in /var/lib/nodeagent-vm/images/*.tar; do /usr/bin/ctr -n k8s.io images import "$tar" || exit 1; done'

[Install]
WantedBy=multi-user.target
EOF_IMAGES

write /etc/systemd/system/nodeagent.service <<'EOF_AGENT'
[Unit]
Description=nodeagent, a kubelet written in Python (standalone: static pods only)
After=containerd.service nodeagent-images.service
Requires=containerd.service
Wants=nodeagent-images.service

[Service]
ExecStart=/opt/nodeagent/bin/nodeagent run --standalone --config /var/lib/kubelet/config.yaml
Restart=always
RestartSec=5
# As the kubelet's unit: stopping the agent leaves the pods' containers (children of containerd's shims) alone.
KillMode=process

[Install]
WantedBy=multi-user.target
EOF_AGENT

systemctl enable containerd.service nodeagent-images.service nodeagent.service >/dev/null 2>&1 ||
  systemctl enable containerd.service nodeagent-images.service nodeagent.service
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  # containerd reads its config at start: a changed one (the cgroup driver) needs a restart.
  if [ "$containerd_before" != "$(cat /etc/containerd/config.toml)" ]; then systemctl restart containerd.service; fi
  systemctl start containerd.service nodeagent-images.service
  # A new wheel or config takes effect now (KillMode=process: the pods' containers are not signalled).
  systemctl restart nodeagent.service
  echo "provision: nodeagent $("$venv/bin/nodeagent" --version | head -1) running standalone; manifests in /etc/kubernetes/manifests"
else
  echo "provision: systemd is not running (chroot): units written and enabled, nothing started"
fi
