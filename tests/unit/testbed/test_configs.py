"""The config files a testbed writes point into its own directory, ports and ranges."""

from __future__ import annotations

import ipaddress
import json
import tomllib
from pathlib import Path

import pytest
import yaml

from cni.config import parse_netconf
from cni.spec import Command
from nodeagent.testbed import cniplugin, configs, hostnet
from nodeagent.testbed.layout import Layout, Settings


def _settings(**over: object) -> Settings:
    base: dict[str, object] = {
        "node_name": "worker-1",
        "etcd_client_port": 20001,
        "etcd_peer_port": 20002,
        "apiserver_port": 20003,
        "controller_manager_port": 20004,
        "scheduler_port": 20005,
        "registry_port": 20006,
        "stream_port": 20007,
        "bridge": "na0123456789",
        "pod_cidr": "198.18.7.0/24",
        "service_cidr": "198.19.0.0/16",
    }
    base.update(over)
    return Settings(**base)  # type: ignore[arg-type]


def test_containerd_config_is_private_to_the_testbed(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    doc = tomllib.loads(configs.containerd_config(layout, _settings()))
    assert doc["root"].startswith(str(tmp_path))
    assert doc["state"].startswith(str(tmp_path))
    assert doc["grpc"]["address"] == str(layout.containerd_socket)
    cri = doc["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == "127.0.0.1:20006/pause:3.10"
    assert cri["stream_server_port"] == "20007"
    assert cri["cni"]["conf_dir"] == str(layout.cni_conf_dir)
    assert cri["cni"]["bin_dir"] == str(layout.cni_bin_dir)
    # CDI for DRA drivers' (and device plugins') devices, from the testbed's own spec directory only.
    assert cri["enable_cdi"] is True
    assert cri["cdi_spec_dirs"] == [str(layout.cdi_spec_dir), "/var/run/cdi"]
    assert layout.cdi_spec_dir.is_relative_to(tmp_path)
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    # A second real handler for RuntimeClass, runc under upstream's e2e name; the default stays runc.
    assert cri["containerd"]["default_runtime_name"] == "runc"
    alt = cri["containerd"]["runtimes"][configs.ALT_RUNTIME_HANDLER]
    assert configs.ALT_RUNTIME_HANDLER == "test-handler"
    assert alt["runtime_type"] == "io.containerd.runc.v2"
    assert alt["options"]["SystemdCgroup"] is False


def test_cni_conflist_is_our_plugin_chained_with_portmap_on_the_testbed_bridge(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    raw = configs.cni_conflist(layout, _settings())
    doc = json.loads(raw)
    assert [p["type"] for p in doc["plugins"]] == ["nodeagent-bridge", "portmap"]
    assert doc["plugins"][1]["capabilities"] == {"portMappings": True}
    bridge = doc["plugins"][0]
    assert bridge["bridge"] == "na0123456789"
    subnet = ipaddress.ip_network(bridge["ipam"]["ranges"][0][0]["subnet"])
    assert subnet.subnet_of(ipaddress.ip_network("198.18.0.0/15"))
    assert bridge["ipam"]["dataDir"] == str(layout.cni_data_dir)
    # The plugin itself accepts it (a chained plugin gets the list's cniVersion and name).
    netconf = {**bridge, "cniVersion": doc["cniVersion"], "name": doc["name"]}
    parsed = parse_netconf(json.dumps(netconf).encode(), Command.ADD)
    assert parsed.is_gateway and parsed.hairpin and "ipMasq" not in bridge


def test_cni_bin_dir_holds_our_plugin_and_links_to_the_reference_ones(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    installed = cniplugin.install_plugins(layout)
    assert installed.path == layout.cni_bin_dir / "nodeagent-bridge"
    assert installed.helper_socket == layout.cni_helper_socket
    for name in ("portmap", "loopback"):
        assert (layout.cni_bin_dir / name).resolve() == (Path(configs.REFERENCE_CNI_DIR) / name).resolve()
    cniplugin.install_plugins(layout)  # again, over the links: idempotent
    with pytest.raises(cniplugin.CNIInstallError, match="portmap is missing"):
        cniplugin.install_plugins(layout, reference_dir=tmp_path / "nowhere")


def test_agent_config_is_a_kubelet_configuration(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    doc = yaml.safe_load(configs.agent_config(layout, _settings()))
    assert doc["apiVersion"] == "kubelet.config.k8s.io/v1beta1"
    assert doc["kind"] == "KubeletConfiguration"
    assert doc["containerRuntimeEndpoint"] == f"unix://{layout.containerd_socket}"
    assert doc["staticPodPath"] == str(tmp_path / "manifests")
    assert "healthzPort" not in doc  # a testbed.json from before the local endpoint: the upstream default
    doc = yaml.safe_load(configs.agent_config(layout, _settings(healthz_port=20008)))
    assert doc["healthzPort"] == 20008


def test_env_file_defines_what_users_and_tests_source(tmp_path: Path) -> None:
    text = configs.env_file(Layout(tmp_path), _settings())
    exported = dict(
        line.removeprefix("export ").split("=", 1) for line in text.splitlines() if line.startswith("export ")
    )
    for key in ("KUBECONFIG", "NODEAGENT_KUBECONFIG", "CONTAINERD_ADDRESS", "REGISTRY"):
        assert key in exported
    assert exported["REGISTRY"] == "127.0.0.1:20006"
    assert exported["GRPC_HEALTH_IMAGE"] == "127.0.0.1:20006/grpc-health:1"
    # upstream's e2e repository path and manifest.go tag, under the testbed's registry
    assert exported["AGNHOST_IMAGE"] == "127.0.0.1:20006/e2e-test-images/agnhost:2.56"
    assert exported["E2E_BUSYBOX_IMAGE"] == "127.0.0.1:20006/e2e-test-images/busybox:1.37.0-1"
    assert exported["NONEWPRIVS_IMAGE"] == "127.0.0.1:20006/e2e-test-images/nonewprivs:1.3"
    # The busybox offered to users is the vanilla 1.37.0 (Debian's 1.35 wget segfaults here), not the tests' own.
    assert exported["BUSYBOX_IMAGE"] == "127.0.0.1:20006/busybox:1.37.0"
    assert configs.busybox_image(_settings()) == "127.0.0.1:20006/busybox:1.35"


@pytest.mark.parametrize(("cluster_dns", "expected"), [("", None), ("198.19.0.10", ["198.19.0.10"])])
def test_agent_config_names_the_cluster_dns_only_when_the_testbed_runs_it(
    tmp_path: Path, cluster_dns: str, expected: list[str] | None
) -> None:
    doc = yaml.safe_load(configs.agent_config(Layout(tmp_path), _settings(cluster_dns=cluster_dns)))
    assert doc.get("clusterDNS") == expected
    assert doc["clusterDomain"] == "cluster.local"


def test_cluster_dns_is_the_tenth_address_of_the_service_range() -> None:
    assert hostnet.cluster_dns_service_ip() == "198.19.0.10"
    assert hostnet.cluster_dns_service_ip("198.19.128.0/20") == "198.19.128.10"


def test_bridge_names_fit_linux_and_differ_per_directory(tmp_path: Path) -> None:
    one, two = hostnet.bridge_name(tmp_path / "a"), hostnet.bridge_name(tmp_path / "b")
    assert one != two
    assert len(one) <= 15 and len(two) <= 15


def test_pod_cidr_avoids_taken_ranges(tmp_path: Path) -> None:
    first = hostnet.choose_pod_cidr(tmp_path, taken=set())
    second = hostnet.choose_pod_cidr(tmp_path, taken={first})
    assert first != second
    for cidr in (first, second):
        assert ipaddress.ip_network(cidr).subnet_of(ipaddress.ip_network("198.18.0.0/15"))
