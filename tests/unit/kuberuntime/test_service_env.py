"""Service environment variables (upstream getServiceEnvVarMap and envvars.FromServices)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.kube.informer import Added, Deleted, Modified, Synced
from nodeagent.kube.servicestore import ServiceStore
from nodeagent.kuberuntime.service_env import from_services, must_wait_for_services, service_env


def svc(name: str, ns: str, ip: str, *ports: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"clusterIP": ip, "ports": list(ports)}}


KUBERNETES = svc("kubernetes", "default", "198.19.0.1", {"name": "https", "port": 443, "protocol": "TCP"})
WEB = svc("my-web", "team", "198.19.0.20", {"port": 80}, {"name": "dns-udp", "port": 53, "protocol": "UDP"})
HEADLESS = svc("headless", "team", "None", {"port": 80})
OTHER_NS = svc("elsewhere", "other", "198.19.0.30", {"port": 8080})


def test_from_services_names_and_values() -> None:
    assert from_services([WEB]) == {
        "MY_WEB_SERVICE_HOST": "198.19.0.20",
        "MY_WEB_SERVICE_PORT": "80",
        "MY_WEB_SERVICE_PORT_DNS_UDP": "53",
        "MY_WEB_PORT": "tcp://198.19.0.20:80",
        "MY_WEB_PORT_80_TCP": "tcp://198.19.0.20:80",
        "MY_WEB_PORT_80_TCP_PROTO": "tcp",
        "MY_WEB_PORT_80_TCP_PORT": "80",
        "MY_WEB_PORT_80_TCP_ADDR": "198.19.0.20",
        "MY_WEB_PORT_53_UDP": "udp://198.19.0.20:53",
        "MY_WEB_PORT_53_UDP_PROTO": "udp",
        "MY_WEB_PORT_53_UDP_PORT": "53",
        "MY_WEB_PORT_53_UDP_ADDR": "198.19.0.20",
    }


def test_ipv6_cluster_ip_is_bracketed() -> None:
    env = from_services([svc("v6", "ns", "fd00::1", {"port": 80})])
    assert env["V6_PORT"] == "tcp://[fd00::1]:80"


@pytest.mark.parametrize(
    ("namespace", "links", "expected_prefixes"),
    [
        ("team", True, {"KUBERNETES", "MY_WEB"}),
        ("team", False, {"KUBERNETES"}),
        ("other", True, {"KUBERNETES", "ELSEWHERE"}),
        ("default", True, {"KUBERNETES"}),
    ],
)
def test_service_env_scope(namespace: str, links: bool, expected_prefixes: set[str]) -> None:
    env = service_env([KUBERNETES, WEB, HEADLESS, OTHER_NS], namespace, enable_service_links=links)
    prefixes = {k.split("_SERVICE_HOST")[0] for k in env if k.endswith("_SERVICE_HOST")}
    assert prefixes == expected_prefixes
    assert env["KUBERNETES_SERVICE_HOST"] == "198.19.0.1"
    assert env["KUBERNETES_SERVICE_PORT"] == "443"
    assert env["KUBERNETES_SERVICE_PORT_HTTPS"] == "443"


def test_a_same_named_service_in_the_pods_namespace_wins_over_the_master() -> None:
    mine = svc("kubernetes", "team", "198.19.0.99", {"port": 1})
    env = service_env([KUBERNETES, mine], "team", enable_service_links=True)
    assert env["KUBERNETES_SERVICE_HOST"] == "198.19.0.99"


def test_store_follows_the_reflector() -> None:
    store = ServiceStore()
    assert not store.synced
    store.apply(Synced((KUBERNETES, WEB), "1"))
    assert store.synced and len(store.list()) == 2
    store.apply(Added(OTHER_NS))
    changed = svc("my-web", "team", "198.19.0.21", {"port": 81})
    store.apply(Modified(changed))
    store.apply(Deleted(KUBERNETES))
    assert sorted(s["metadata"]["name"] for s in store.list()) == ["elsewhere", "my-web"]
    assert next(s for s in store.list() if s["metadata"]["name"] == "my-web") is changed
    store.apply(Synced((), "9"))
    assert store.list() == []


@pytest.mark.parametrize(
    ("static", "synced", "wait"),
    [
        (False, False, True),  # an API pod before the first list: CreateContainerConfigError, retried
        (False, True, False),
        (True, False, False),  # a static pod never waits (the apiserver may be one of them)
        (True, True, False),
    ],
)
def test_only_api_pods_wait_for_the_first_service_list(static: bool, synced: bool, wait: bool) -> None:
    assert must_wait_for_services(static=static, synced=synced) is wait
