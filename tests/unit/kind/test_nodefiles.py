"""The node image's configuration texts and the image-name map (nodefiles.py)."""

from __future__ import annotations

import tomllib

from nodeagent.kind import nodefiles
from nodeagent.testbed.controlplaneimages import KUBERNETES_IMAGES


def test_upstream_names_are_kubeadm_v1_34_4s_list() -> None:
    # `kubeadm config images list --kubernetes-version v1.34.4`, as printed by the cached kubeadm.
    expected = {
        "registry.k8s.io/kube-apiserver:v1.34.4",
        "registry.k8s.io/kube-controller-manager:v1.34.4",
        "registry.k8s.io/kube-scheduler:v1.34.4",
        "registry.k8s.io/kube-proxy:v1.34.4",
        "registry.k8s.io/coredns/coredns:v1.12.1",
        "registry.k8s.io/pause:3.10.1",
        "registry.k8s.io/etcd:3.6.5-0",
    }
    names = nodefiles.upstream_image_names("v1.34.4")
    assert {n.upstream for n in names} == expected
    assert {n.local for n in names} == {*KUBERNETES_IMAGES, "etcd", "coredns", "pause"}
    assert len(names) == len(expected)


def test_containerd_config_follows_the_cgroup_driver() -> None:
    for systemd, expected in ((True, True), (False, False)):
        doc = tomllib.loads(nodefiles.containerd_config(systemd_cgroup=systemd))
        cri = doc["plugins"]["io.containerd.grpc.v1.cri"]
        assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is expected
        assert cri["containerd"]["runtimes"]["runc"]["runtime_type"] == "io.containerd.runc.v2"
        assert cri["sandbox_image"] == "registry.k8s.io/pause:3.10.1"
        assert cri["cni"]["bin_dir"] == "/opt/cni/bin"
        assert doc["grpc"]["address"] == "/run/containerd/containerd.sock"
        assert doc["version"] == 2


def test_entrypoint_rewrites_exactly_the_snapshotter_line() -> None:
    # The entrypoint's sed must match the line containerd_config writes.
    config = nodefiles.containerd_config(systemd_cgroup=True)
    assert '  snapshotter = "overlayfs"' in config.splitlines()
    script = nodefiles.entrypoint_script()
    assert "s/^  snapshotter = .*/" in script
    assert script.startswith("#!/bin/sh\n")
    assert script.rstrip().endswith('exec "$@"')
    assert "mount --make-rshared /" in script
    assert "  restrict_oom_score_adj = false" in config.splitlines()
    assert "s/^  restrict_oom_score_adj = .*/  restrict_oom_score_adj = true/" in script
    assert "(0x$bounding >> 24) & 1" in script


def test_containerd_config_can_restrict_oom_scores() -> None:
    doc = tomllib.loads(nodefiles.containerd_config(systemd_cgroup=True, restrict_oom_score_adj=True))
    assert doc["plugins"]["io.containerd.grpc.v1.cri"]["restrict_oom_score_adj"] is True


def test_kubeadm_dropin_runs_the_kubelet_with_kubeadms_variables() -> None:
    dropin = nodefiles.kubeadm_dropin()
    lines = dropin.splitlines()
    assert "ExecStart=" in lines  # resets the base unit's command
    start = [line for line in lines if line.startswith("ExecStart=/")]
    assert start == [
        "ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS "
        "$KUBELET_EXTRA_ARGS"
    ]
    assert "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env" in lines
    assert f"ExecStartPre={nodefiles.KUBELET_CGROUP_ROOT_SCRIPT}" in lines
    assert "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf" in dropin


def test_kubelet_runs_in_the_slice_kinds_cgroup_root_names() -> None:
    assert "Slice=kubelet.slice" in nodefiles.kubelet_service().splitlines()
    assert "[Slice]" in nodefiles.kubelet_slice()
    script = nodefiles.kubelet_cgroup_root_script()
    # Only mounted v1 hierarchies (Docker leaves empty directories such as cpu,cpuacct on its tmpfs).
    assert '[ -f "$d/cgroup.procs" ] || continue' in script
    assert "cgroup.controllers ] && exit 0" in script


def test_commit_changes_make_a_node_image() -> None:
    changes = nodefiles.commit_changes({"b": "2", "a": "1"})
    assert changes[:3] == [
        'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]',
        "CMD []",
        "ENV container=docker",
    ]
    assert not any(c.startswith("STOPSIGNAL") for c in changes)  # dockerd 20.10 refuses it in a commit
    assert changes[3:] == ['LABEL a="1"', 'LABEL b="2"']


def test_entrypoint_forwards_the_node_address_to_dockers_resolver() -> None:
    script = nodefiles.entrypoint_script()
    assert "sysctl -qw net.ipv4.conf.all.route_localnet=1" in script
    assert "for chain in OUTPUT PREROUTING; do" in script
    assert '-p udp --dport 53 -j DNAT --to-destination "127.0.0.11:$udp"' in script
    assert '-p tcp --dport 53 -j DNAT --to-destination "127.0.0.11:$tcp"' in script
    assert "s/^nameserver 127.0.0.11$/nameserver $node_ip/" in script
    # /etc/resolv.conf is Docker's bind mount: rewritten in place, never replaced by sed -i's rename.
    assert "sed -i" not in script.split("route_localnet")[1].split("fi\n")[0]
    assert script.index("route_localnet") < script.index('exec "$@"')
