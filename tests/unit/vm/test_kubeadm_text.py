"""nodeagent/vm/kubeadm.py: the kubelet unit, kubeadm's drop-in and the init configuration used in the VM."""

from __future__ import annotations

import re

import yaml

from nodeagent.kubeletflags import KUBEADM_FIXED_ARGS
from nodeagent.testbed.versions import KUBERNETES_VERSION
from nodeagent.vm import kubeadm


def test_init_config_leaves_the_cgroup_driver_to_kubeadm() -> None:
    docs = list(
        yaml.safe_load_all(kubeadm.init_config(node_name="nodeagent-vm", address="198.18.7.20", etcd_tag="3.5.16-0"))
    )
    init, cluster, kubelet = docs
    assert init["kind"] == "InitConfiguration"
    assert init["localAPIEndpoint"] == {"advertiseAddress": "198.18.7.20", "bindPort": 6443}
    registration = init["nodeRegistration"]
    assert registration["name"] == "nodeagent-vm"
    assert registration["criSocket"] == "unix:///run/containerd/containerd.sock"
    assert registration["kubeletExtraArgs"] == [{"name": "node-ip", "value": "198.18.7.20"}]
    assert registration["ignorePreflightErrors"] == ["Mem"]
    assert init["timeouts"]["controlPlaneComponentHealthCheck"] == "30m0s"
    assert cluster["kind"] == "ClusterConfiguration"
    assert cluster["kubernetesVersion"] == KUBERNETES_VERSION
    assert cluster["etcd"] == {"local": {"imageTag": "3.5.16-0"}}
    assert cluster["apiServer"]["certSANs"] == ["198.18.7.20"]
    # No cgroupDriver: kubeadm's default, systemd, is what the VM's agent must take.
    assert kubelet == {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"}


def test_image_refs_are_kubeadm_defaults() -> None:
    refs = kubeadm.image_refs("3.5.16-0", "3.10.1")
    assert refs == {
        "kube-apiserver": f"registry.k8s.io/kube-apiserver:{KUBERNETES_VERSION}",
        "kube-controller-manager": f"registry.k8s.io/kube-controller-manager:{KUBERNETES_VERSION}",
        "kube-scheduler": f"registry.k8s.io/kube-scheduler:{KUBERNETES_VERSION}",
        "etcd": "registry.k8s.io/etcd:3.5.16-0",
        "pause": "registry.k8s.io/pause:3.10.1",
    }


def test_drop_in_passes_kubeadms_fixed_arguments_to_the_console_script() -> None:
    environment = dict(re.findall(r'^Environment="(\w+)=(.*)"$', kubeadm.KUBEADM_DROP_IN.replace("\\\n", ""), re.M))
    fixed = environment["KUBELET_KUBECONFIG_ARGS"].split() + environment["KUBELET_CONFIG_ARGS"].split()
    assert tuple(fixed) == KUBEADM_FIXED_ARGS
    exec_lines = [line for line in kubeadm.KUBEADM_DROP_IN.splitlines() if line.startswith("ExecStart=")]
    assert exec_lines == [
        "ExecStart=",
        "ExecStart=/opt/nodeagent/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS "
        "$KUBELET_EXTRA_ARGS",
    ]
    assert "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env" in kubeadm.KUBEADM_DROP_IN
    assert "ExecStart=/opt/nodeagent/bin/kubelet\n" in kubeadm.KUBELET_UNIT


def test_init_argv_skips_the_addons() -> None:
    assert kubeadm.init_argv("/tmp/k.yaml") == [
        "kubeadm",
        "init",
        "--config=/tmp/k.yaml",
        "--skip-phases=addon/kube-proxy,addon/coredns",
        "--v=1",
    ]
