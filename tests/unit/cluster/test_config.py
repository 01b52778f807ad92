"""What `cluster up` hands kubeadm (nodeagent/cluster/config.py) and reads back from it."""

from __future__ import annotations

import ipaddress

import pytest
import yaml

from nodeagent.cluster import config
from nodeagent.cluster.config import NodePlan

NODE = NodePlan(
    name="cp",
    pod_cidr="198.18.7.0/24",
    kubelet_port=10250,
    healthz_port=10248,
    cgroup_root="/na-x",
    address="198.18.5.2",
)
WORKER = NodePlan(
    name="w1",
    pod_cidr="198.18.9.0/24",
    kubelet_port=10250,
    healthz_port=10248,
    cgroup_root="/na-y",
    address="198.18.5.3",
)
HASH = "sha256:" + "ab" * 32


def docs(text: str) -> dict[str, dict[str, object]]:
    return {str(d["kind"]): d for d in yaml.safe_load_all(text)}


def init_docs() -> dict[str, dict[str, object]]:
    return docs(
        config.init_config(
            NODE,
            registry="127.0.0.1:5000",
            etcd_tag="3.5.16-0",
            service_cidr="198.18.200.0/24",
            etcd_data_dir="/d/etcd",
            cri_socket="unix:///d/containerd.sock",
            token="abcdef.0123456789abcdef",
            patches_dir="/d/patches",
            coredns_tag="v1.14.3",
        )
    )


def test_init_config_points_kubeadm_at_the_local_images_and_the_nodes_address() -> None:
    d = init_docs()
    assert set(d) == {"InitConfiguration", "ClusterConfiguration", "KubeletConfiguration", "KubeProxyConfiguration"}
    cluster = d["ClusterConfiguration"]
    assert cluster["apiVersion"] == "kubeadm.k8s.io/v1beta4"
    assert cluster["imageRepository"] == "127.0.0.1:5000"
    assert cluster["kubernetesVersion"] == "v1.34.4"
    assert cluster["etcd"] == {"local": {"imageTag": "3.5.16-0", "dataDir": "/d/etcd"}}
    assert cluster["controlPlaneEndpoint"] == "198.18.5.2:6443"
    assert cluster["apiServer"] == {"extraArgs": [{"name": "bind-address", "value": "198.18.5.2"}]}
    init = d["InitConfiguration"]
    assert init["localAPIEndpoint"] == {"advertiseAddress": "198.18.5.2", "bindPort": 6443}
    assert init["patches"] == {"directory": "/d/patches"}
    registration = init["nodeRegistration"]
    assert isinstance(registration, dict)
    assert registration["name"] == "cp"
    assert registration["criSocket"] == "unix:///d/containerd.sock"
    assert registration["kubeletExtraArgs"] == [{"name": "node-ip", "value": "198.18.5.2"}]
    assert d["KubeletConfiguration"]["cgroupDriver"] == "cgroupfs"
    assert init["timeouts"] == {"kubeletHealthCheck": "1m0s", "controlPlaneComponentHealthCheck": "2m0s"}


def test_runtime_config_reaches_the_apiserver_only_when_asked() -> None:
    """`cluster up --preset devices`: the apiserver serves what upstream's DRA cluster serves (test/e2e/dra/kind.yaml),
    beside its bind address; without it, no runtime-config at all."""
    text = config.init_config(
        NODE,
        registry="127.0.0.1:5000",
        etcd_tag="3.5.16-0",
        service_cidr="198.18.200.0/24",
        etcd_data_dir="/d/etcd",
        cri_socket="unix:///d/containerd.sock",
        token="abcdef.0123456789abcdef",
        patches_dir="/d/patches",
        coredns_tag="v1.14.3",
        runtime_config="resource.k8s.io/v1beta1=true",
    )
    assert docs(text)["ClusterConfiguration"]["apiServer"] == {
        "extraArgs": [
            {"name": "bind-address", "value": "198.18.5.2"},
            {"name": "runtime-config", "value": "resource.k8s.io/v1beta1=true"},
        ]
    }
    assert "runtime-config" not in str(init_docs()["ClusterConfiguration"])


def test_the_service_range_is_only_ever_from_198_18_0_0_15() -> None:
    networking = init_docs()["ClusterConfiguration"]["networking"]
    assert isinstance(networking, dict)
    service = ipaddress.IPv4Network(networking["serviceSubnet"])
    assert service.subnet_of(ipaddress.IPv4Network("198.18.0.0/15"))
    # No podSubnet: the controller-manager allocates no ranges; each node's CNI config holds its own.
    assert "podSubnet" not in networking


def test_join_config_pins_the_ca_and_ignores_no_preflight_check() -> None:
    d = docs(
        config.join_config(
            WORKER,
            api_endpoint="198.18.7.1:6443",
            token="abcdef.0123456789abcdef",
            ca_cert_hash=HASH,
            cri_socket="unix:///w/containerd.sock",
            patches_dir="/w/patches",
        )
    )
    join = d["JoinConfiguration"]
    assert join["discovery"] == {
        "bootstrapToken": {
            "apiServerEndpoint": "198.18.7.1:6443",
            "token": "abcdef.0123456789abcdef",
            "caCertHashes": [HASH],
        }
    }
    registration = join["nodeRegistration"]
    assert isinstance(registration, dict)
    # Each node has a network namespace of its own (nodenet.py): its own 10250, its own ip_forward.
    assert registration["ignorePreflightErrors"] == []
    assert join["patches"] == {"directory": "/w/patches"}
    assert join["timeouts"] == {"kubeletHealthCheck": "1m0s", "tlsBootstrap": "2m0s", "discovery": "1m0s"}


def test_every_ignored_preflight_check_says_why() -> None:
    for name, why in config.PREFLIGHT_IGNORED.items():
        assert name and why.strip(), name


@pytest.mark.parametrize(
    ("plan", "expected"),
    [
        (NODE, {"address": "198.18.5.2", "port": 10250, "healthzPort": 10248, "podCIDR": "198.18.7.0/24"}),
        (WORKER, {"address": "198.18.5.3", "port": 10250, "healthzPort": 10248, "podCIDR": "198.18.9.0/24"}),
    ],
)
def test_kubelet_patch_holds_the_nodes_own_fields(plan: NodePlan, expected: dict[str, object]) -> None:
    patch = yaml.safe_load(config.kubelet_patch(plan))
    assert {k: patch[k] for k in expected} == expected
    assert patch["cgroupRoot"] == plan.cgroup_root


INIT_TAIL = f"""Then you can join any number of worker nodes by running the following on each as root:

kubeadm join 198.18.7.1:6443 --token abcdef.0123456789abcdef \\
	--discovery-token-ca-cert-hash {HASH}
"""


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (INIT_TAIL, config.JoinCommand("198.18.7.1:6443", "abcdef.0123456789abcdef", HASH)),
        (
            f"kubeadm join 1.2.3.4:6443 --token t.u --discovery-token-ca-cert-hash {HASH} \n",
            config.JoinCommand("1.2.3.4:6443", "t.u", HASH),
        ),
    ],
)
def test_parse_join_command(output: str, expected: config.JoinCommand) -> None:
    assert config.parse_join_command(output) == expected


def test_parse_join_command_without_one_is_an_error() -> None:
    with pytest.raises(ValueError, match="no `kubeadm join"):
        config.parse_join_command("[init] Using Kubernetes version: v1.34.4\n")


@pytest.mark.parametrize(
    ("kube_proxy", "expected"),
    # CoreDNS goes with kube-proxy: without it the `kubernetes` ClusterIP it lists through is not served.
    [(True, []), (False, ["addon/kube-proxy", "addon/coredns"])],
)
def test_skipped_phases(kube_proxy: bool, expected: list[str]) -> None:
    assert config.skipped_phases(kube_proxy=kube_proxy) == expected


def test_coredns_is_the_image_built_here_under_the_clusters_repository() -> None:
    cluster = init_docs()["ClusterConfiguration"]
    # No imageRepository of its own: kubeadm then names <imageRepository>/coredns (not .../coredns/coredns).
    assert cluster["dns"] == {"imageTag": "v1.14.3"}


def test_kube_proxy_config_serves_each_nodes_own_address_and_leaves_the_hosts_sysctls() -> None:
    proxy = init_docs()["KubeProxyConfiguration"]
    assert proxy["mode"] == "iptables"
    # One kube-proxy per node, each in its node's network namespace: upstream's listeners.
    assert proxy["healthzBindAddress"] == "0.0.0.0:10256"
    assert proxy["metricsBindAddress"] == "127.0.0.1:10249"
    # NodePorts on each node's own InternalIP: no route_localnet, nothing on the pod bridge's gateway.
    assert proxy["nodePortAddresses"] == ["primary"]
    assert proxy["conntrack"] == {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"}
    # No clusterCIDR: no "masquerade what comes from outside the pod range" rule (see kube_proxy_config).
    assert "clusterCIDR" not in proxy


@pytest.mark.parametrize(
    ("service_cidr", "dns"),
    [("198.18.200.0/24", "198.18.200.10"), ("198.19.4.0/24", "198.19.4.10"), ("198.18.0.0/16", "198.18.0.10")],
)
def test_cluster_dns_is_the_tenth_service_address(service_cidr: str, dns: str) -> None:
    assert config.cluster_dns_ip(service_cidr) == dns


def test_the_cluster_info_signature_is_keyed_by_the_token_id() -> None:
    assert config.cluster_info_signature_key("abcdef.0123456789abcdef") == "jws-kubeconfig-abcdef"
