"""The testbed's node has an address of its own: the gateway of its pod range, on its bridge. The agent is told it,
listens on it, and its serving certificate names it; the CNI plugin uses it as the pods' gateway."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from cni.config import parse_netconf
from cni.spec import Command
from nodeagent.testbed import configs, hostnet
from nodeagent.testbed.layout import Layout, Settings
from nodeagent.testbed.testbed import _make_pki


def _settings(pod_cidr: str) -> Settings:
    return Settings(
        node_name="worker-1",
        etcd_client_port=20001,
        etcd_peer_port=20002,
        apiserver_port=20003,
        controller_manager_port=20004,
        scheduler_port=20005,
        registry_port=20006,
        stream_port=20007,
        bridge="na0123456789",
        pod_cidr=pod_cidr,
        service_cidr="198.19.0.0/16",
        healthz_port=20008,
        kubelet_port=20009,
        metrics_server_port=20010,
    )


@pytest.mark.parametrize(
    ("pod_cidr", "node_ip"),
    [("198.18.7.0/24", "198.18.7.1"), ("198.18.0.0/24", "198.18.0.1"), ("198.18.255.0/24", "198.18.255.1")],
)
def test_node_ip_is_the_gateway_of_the_pod_range(pod_cidr: str, node_ip: str) -> None:
    settings = _settings(pod_cidr)
    assert settings.node_ip == node_ip
    assert hostnet.gateway(pod_cidr) == ipaddress.IPv4Interface(f"{node_ip}/24")
    address = ipaddress.ip_address(node_ip)
    # What the apiserver's proxy and an EndpointSlice refuse: loopback, link-local, unspecified.
    assert not (address.is_loopback or address.is_link_local or address.is_unspecified)
    assert address in ipaddress.ip_network("198.18.0.0/15")


def test_agent_listens_on_the_node_address(tmp_path: Path) -> None:
    settings = _settings("198.18.7.0/24")
    doc = yaml.safe_load(configs.agent_config(Layout(tmp_path), settings))
    assert doc["address"] == "198.18.7.1"
    assert doc["port"] == 20009
    assert doc["authentication"]["anonymous"] == {"enabled": False}


def test_cni_gateway_is_the_node_address(tmp_path: Path) -> None:
    settings = _settings("198.18.7.0/24")
    doc = json.loads(configs.cni_conflist(Layout(tmp_path), settings))
    bridge = doc["plugins"][0]
    assert bridge["mtu"] == configs.BRIDGE_MTU
    netconf = {**bridge, "cniVersion": doc["cniVersion"], "name": doc["name"]}
    parsed = parse_netconf(json.dumps(netconf).encode(), Command.ADD)
    (range_set,) = parsed.ipam.ranges
    assert str(range_set[0].gateway) == settings.node_ip == str(hostnet.gateway(settings.pod_cidr).ip)


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _sans(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return set(ext.get_values_for_type(x509.DNSName)), {str(i) for i in ext.get_values_for_type(x509.IPAddress)}


def test_serving_certificates_name_the_node_address(tmp_path: Path) -> None:
    pki = _make_pki(Layout(tmp_path), "worker-1", "198.18.7.1")
    dns, ips = _sans(_cert(pki.kubelet_serving.cert))
    assert ips == {"127.0.0.1", "198.18.7.1"}
    assert "worker-1" in dns
    dns, ips = _sans(_cert(pki.metrics_server_serving.cert))
    assert ips == {"198.18.7.1"}
    assert "metrics-server.kube-system.svc" in dns
    ca = _cert(pki.ca.cert)
    _cert(pki.metrics_server_serving.cert).verify_directly_issued_by(ca)
    client = _cert(pki.metrics_server_client.cert)
    client.verify_directly_issued_by(ca)
    assert client.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:metrics-server"


def test_front_proxy_client_comes_from_its_own_ca(tmp_path: Path) -> None:
    pki = _make_pki(Layout(tmp_path), "worker-1", "198.18.7.1")
    client = _cert(pki.front_proxy_client.cert)
    client.verify_directly_issued_by(_cert(pki.front_proxy_ca.cert))
    assert client.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "front-proxy-client"
    assert ExtendedKeyUsageOID.CLIENT_AUTH in client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    # Not the cluster CA: a cluster client certificate can never pass for the aggregator.
    assert pki.front_proxy_ca.cert != pki.ca.cert
    with pytest.raises((ValueError, TypeError, x509.verification.VerificationError)):
        client.verify_directly_issued_by(_cert(pki.ca.cert))
