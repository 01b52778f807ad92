"""kubeadm's addons on a nodeagent cluster: kube-proxy and CoreDNS (issue 19), end to end.

`cluster up --nodes 2` with the addons: kubeadm's kube-proxy DaemonSet, one kube-proxy per node, each in its node's
network namespace with that node's iptables (cluster/nodenet.py), and kubeadm's CoreDNS Deployment (2 replicas) from
the image built here (testbed/coredns.py). A pod on each node resolves kubernetes.default.svc.cluster.local through
the DNS Service (the clusterDNS kubeadm wrote into each node's config.yaml) and reaches the apiserver through the
`kubernetes` Service's ClusterIP. The host's iptables never get a KUBE-* chain from the cluster, and a testbed's
kube-proxy holding the host does not matter. `cluster down` then leaves nothing: no process, mount, netns, bridge,
veth, cgroup, FORWARD rule.

Marker `cluster`, deselected by default (pyproject's addopts): minutes of kubeadm on 2 cores, run as
scripts/test-all.sh's cluster step.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
import yaml

from nodeagent.cluster import config
from nodeagent.cluster.cluster import Cluster, ClusterError, wait_nodes_ready
from nodeagent.testbed import images, kubeproxy, registry
from nodeagent.testbed.coredns import COREDNS_VERSION
from nodeagent.testbed.versions import cache_root
from tests.integration.clusterkit import temporary_cluster
from tests.integration.test_kubeadm_cluster import KUBECTL, bridge_veths, kubectl, kubectl_json, leftovers, pod_netns

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def host_rules_naming(addresses: list[str]) -> list[str]:
    """The host's nat and filter rules that name any of `addresses` (the cluster's ClusterIPs). The host's chains as
    a whole are no measure: a testbed's kube-proxy, brought up meanwhile by another run, writes its own there."""
    found = []
    for table in ("nat", "filter"):
        out = subprocess.run(["iptables", "-w", "-t", table, "-S"], capture_output=True, text=True, check=True).stdout
        found += [line for line in out.splitlines() if any(f"{a}/32" in line for a in addresses)]
    return found


def nat_rules(cluster: Cluster, index: int) -> list[str]:
    """The nat table of node `index`'s own network namespace (where its kube-proxy writes)."""
    pid = cluster.nodes(cluster.state())[index].link().pid
    return subprocess.run(
        ["nsenter", "-t", str(pid), "-n", "--", "iptables", "-w", "-t", "nat", "-S"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()


@pytest_asyncio.fixture
async def cluster() -> AsyncIterator[Cluster]:
    async with temporary_cluster("nodeagent-kubeadm-addons-") as made:
        yield made


def probe_pod(name: str, node: str, image: str, api_ip: str) -> dict[str, Any]:
    """A pod on `node` (ClusterFirst DNS, as any API pod) that prints its resolv.conf, resolves the apiserver's
    Service name, and speaks plain HTTP to the `kubernetes` ClusterIP's 443: only the apiserver (through
    kube-proxy's DNAT) answers that with Go's "Client sent an HTTP request to an HTTPS server"."""
    script = (
        "cat /etc/resolv.conf; echo ---; nslookup kubernetes.default.svc.cluster.local; echo ---; "
        f"printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {api_ip} 443; echo; echo END"
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [{"name": "probe", "image": image, "command": ["sh", "-c", script]}],
        },
    }


def wait_pod_done(cluster: Cluster, name: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        phase = kubectl_json(cluster, "get", "pod", name).get("status", {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            return str(phase)
        assert time.monotonic() < deadline, f"pod {name} still {phase} after {timeout:.0f}s"
        time.sleep(1)


async def test_kube_proxy_and_coredns_on_a_two_node_cluster(cluster: Cluster) -> None:
    started = time.monotonic()
    try:
        await cluster.up(2)
    except ClusterError as exc:
        pytest.fail(f"cluster up: {exc}")
    state = cluster.state()
    first, second = state.nodes
    # The cluster never claims the host's kube-proxy (testbed/kubeproxy.py): its kube-proxies are its nodes'.
    owner = kubeproxy.live_owner()
    assert owner is None or owner.root != str(cluster.root.resolve()), owner
    ready = await wait_nodes_ready(KUBECTL, cluster.admin_kubeconfig, [first.name, second.name], timeout=120)
    up_took = time.monotonic() - started
    print(f"init {cluster.timings['init']:.1f}s join {cluster.timings[f'join:{second.name}']:.1f}s ready +{ready:.1f}s")

    # kube-proxy: kubeadm's DaemonSet as it is, one pod Running on each node.
    kubectl(cluster, "-n", "kube-system", "rollout", "status", "daemonset/kube-proxy", "--timeout=90s")
    ds = kubectl_json(cluster, "-n", "kube-system", "get", "daemonset", "kube-proxy")
    assert "kubernetes.io/hostname" not in ds["spec"]["template"]["spec"].get("nodeSelector", {})
    proxies = kubectl_json(cluster, "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-proxy")["items"]
    live = [p for p in proxies if not p["metadata"].get("deletionTimestamp")]
    assert sorted((p["spec"]["nodeName"], p["status"]["phase"]) for p in live) == sorted(
        [(first.name, "Running"), (second.name, "Running")]
    ), proxies
    assert ds["status"]["desiredNumberScheduled"] == 2 and ds["status"]["numberReady"] == 2, ds["status"]

    # kube-proxy's config: no clusterCIDR (no masquerading of traffic merely leaving the pod ranges), NodePorts on
    # each node's own InternalIP.
    proxy_cm = kubectl_json(cluster, "-n", "kube-system", "get", "configmap", "kube-proxy")
    proxy_conf = yaml.safe_load(proxy_cm["data"]["config.conf"])
    assert proxy_conf["mode"] == "iptables"
    assert proxy_conf["clusterCIDR"] == ""
    assert proxy_conf["nodePortAddresses"] == ["primary"]

    # CoreDNS: kubeadm's Deployment with the image built here, both replicas Ready.
    kubectl(cluster, "-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=55s")
    dns_deploy = kubectl_json(cluster, "-n", "kube-system", "get", "deployment", "coredns")
    assert (
        dns_deploy["spec"]["template"]["spec"]["containers"][0]["image"]
        == f"{state.registry}/coredns:{COREDNS_VERSION}"
    )
    assert dns_deploy["status"]["readyReplicas"] == 2, dns_deploy["status"]
    dns_pods = kubectl_json(cluster, "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns")["items"]
    # Where the scheduler put them (kubeadm's anti-affinity is only preferred; both often land on the first node,
    # the only one when init created them): the probes below resolve from both nodes either way.
    print("coredns on", sorted(p["spec"]["nodeName"] for p in dns_pods))

    # The DNS Service is the 10th address of the Service range, and every node's kubelet got it as clusterDNS.
    dns_ip = config.cluster_dns_ip(state.service_cidr)
    assert kubectl_json(cluster, "-n", "kube-system", "get", "service", "kube-dns")["spec"]["clusterIP"] == dns_ip
    for index in range(2):
        kubelet_conf = yaml.safe_load((cluster.node_root(index) / "var-lib-kubelet" / "config.yaml").read_text())
        assert kubelet_conf["clusterDNS"] == [dns_ip]
    api_ip = kubectl_json(cluster, "get", "service", "kubernetes")["spec"]["clusterIP"]
    assert api_ip == str(ipaddress.ip_network(state.service_cidr).network_address + 1)

    # What each node's kube-proxy wrote in its node's namespace: the Services in KUBE-SERVICES, and masquerading
    # only of what it marked itself. The host got none of it.
    assert host_rules_naming([dns_ip, api_ip]) == [], "the cluster's Services in the host's iptables"
    assert any("KUBE-SERVICES" in r for r in nat_rules(cluster, 1)), "the second node's kube-proxy wrote its rules"
    nat = nat_rules(cluster, 0)
    assert any("KUBE-SERVICES" in r and f"{dns_ip}/32" in r for r in nat), "no rule for the DNS Service"
    assert any("KUBE-SERVICES" in r and f"{api_ip}/32" in r for r in nat), "no rule for the kubernetes Service"
    # As upstream's iptables proxier: KUBE-POSTROUTING first returns whatever is unmarked (0x4000, KUBE-MARK-MASQ),
    # and only then masquerades; no other KUBE-* chain masquerades.
    masquerades = [r for r in nat if "-j MASQUERADE" in r and "KUBE-" in r]
    assert masquerades and all(r.startswith("-A KUBE-POSTROUTING ") for r in masquerades), masquerades
    postrouting = [r for r in nat if r.startswith("-A KUBE-POSTROUTING ")]
    assert "! --mark 0x4000/0x4000" in postrouting[0] and "-j RETURN" in postrouting[0], postrouting
    assert not [r for r in nat if "KUBE-" in r and "! -s" in r and "KUBE-MARK-MASQ" in r], "off-cluster masquerade"

    # From a pod on each node: the resolv.conf names the cluster DNS, the name resolves to the kubernetes Service,
    # and that ClusterIP reaches the apiserver.
    busybox = images.build_busybox_image(cache_root() / "images" / "busybox")
    await registry.push_image(state.registry, "busybox", "1.35", busybox)
    box = f"{state.registry}/busybox:1.35"
    for plan in (first, second):
        name = f"probe-{plan.name}"
        kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(probe_pod(name, plan.name, box, api_ip)))
        phase = wait_pod_done(cluster, name)
        logs = kubectl(cluster, "logs", name)
        print(f"--- {name} ({phase})\n{logs}")
        resolv, lookup, api = logs.split("---", 2)
        assert f"nameserver {dns_ip}" in resolv
        assert "search default.svc.cluster.local svc.cluster.local cluster.local" in resolv
        assert "kubernetes.default.svc.cluster.local" in lookup and f"Address: {api_ip}" in lookup, lookup
        assert "Client sent an HTTP request to an HTTPS server" in api, api
        assert phase == "Succeeded"

    # What down must remove, recorded while it exists.
    netns = pod_netns(cluster)
    nodes = cluster.nodes(cluster.state())
    bridges = [node.settings.bridge for node in nodes] + [cluster.state().fabric.bridge]
    # The pods' veths are inside the nodes' namespaces and go with them; the host holds the nodes' veths.
    veths = [node.veth for node in nodes]
    assert netns and all(bridge_veths(cluster.state().fabric.bridge).count(v) == 1 for v in veths)
    cgroup_roots = [plan.cgroup_root for plan in cluster.state().nodes]

    down_started = time.monotonic()
    removed = await cluster.down()
    print(f"up+Ready {up_took:.0f}s; down {time.monotonic() - down_started:.0f}s removed {len(removed)}")
    print(f"total {time.monotonic() - started:.0f}s")
    assert leftovers(cluster.root, netns, bridges, veths, cgroup_roots) == []
    assert host_rules_naming([dns_ip, api_ip]) == [], "the cluster's Services in the host's iptables"
    owner = kubeproxy.live_owner()
    assert owner is None or owner.root != str(cluster.root.resolve()), owner
