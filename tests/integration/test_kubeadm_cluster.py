"""kubeadm init and join with nodeagent as the kubelet, end to end (issue 19).

One cluster of two nodes on this machine (nodeagent/cluster): kubeadm v1.34.4 builds the control plane from images
made here from the testbed's binaries, nodeagent runs it as static pods (hostNetwork, hostPath, probes,
system-node-critical), kubeadm's waits succeed and the node is Ready; a second nodeagent node joins through TLS
bootstrap, is Ready, and a Deployment's pods run on both. A join with a wrong CA hash fails with kubeadm's message and
leaves no Node. `kubeadm reset` on every node then leaves no process, mount, netns, veth or cgroup behind.

kubeadm's addons (kube-proxy, CoreDNS) are skipped here (`kube_proxy=False`): test_kubeadm_addons.py and
test_cluster_network.py cover them. This test needs no session testbed of its own; kubeadm's fixed ports (6443,
2379-2381, 10248, 10250, 10257, 10259) are each node's own, in its network namespace (cluster/nodenet.py).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from nodeagent.cluster.cluster import Cluster, ClusterError, wait_nodes_ready
from nodeagent.cluster.node import leftover_cgroups
from nodeagent.testbed import hostnet, images, registry
from nodeagent.testbed.versions import cache_root, crictl_path, kubernetes_bin_dir
from tests.integration.clusterkit import temporary_cluster

pytestmark = pytest.mark.integration

KUBECTL = kubernetes_bin_dir() / "kubectl"
WRONG_HASH = "sha256:" + "0" * 64


def kubectl(cluster: Cluster, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(
        [str(KUBECTL), f"--kubeconfig={cluster.admin_kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def kubectl_json(cluster: Cluster, *args: str) -> Any:
    return json.loads(kubectl(cluster, *args, "-o", "json"))


def processes_under(root: Path) -> list[str]:
    """Command lines of processes that name the cluster's directory (containerd, kubelets, helpers, shims)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(root) in argv:
            found.append(f"{entry.name}: {argv[:200]}")
    return found


def pod_netns(cluster: Cluster) -> list[str]:
    """The network namespaces of the pods of every node (crictl inspectp on each node's containerd)."""
    paths = []
    for node in cluster.nodes(cluster.state()):
        endpoint = f"--runtime-endpoint={node.cri_socket}"
        ids = subprocess.run(
            [str(crictl_path()), endpoint, "pods", "-q"], capture_output=True, text=True, check=True
        ).stdout.split()
        for pod_id in ids:
            info = json.loads(
                subprocess.run(
                    [str(crictl_path()), endpoint, "inspectp", pod_id], capture_output=True, text=True, check=True
                ).stdout
            )
            for ns in info.get("info", {}).get("runtimeSpec", {}).get("linux", {}).get("namespaces", []):
                if ns.get("type") == "network" and ns.get("path"):
                    paths.append(Path(ns["path"]).name)
    return paths


def bridge_veths(bridge: str) -> list[str]:
    out = subprocess.run(["ip", "-j", "link", "show", "master", bridge], capture_output=True, text=True, check=False)
    return [link["ifname"] for link in json.loads(out.stdout or "[]")]


@pytest_asyncio.fixture
async def cluster() -> AsyncIterator[Cluster]:
    async with temporary_cluster("nodeagent-kubeadm-") as made:
        yield made


async def test_kubeadm_init_join_and_reset(cluster: Cluster) -> None:
    started = time.monotonic()
    try:
        await cluster.up(2, kube_proxy=False)
    except ClusterError as exc:
        pytest.fail(f"cluster up: {exc}")
    state = cluster.state()
    first, second = state.nodes
    # kubeadm's own waits passed (init waits for the kubelet's healthz and the static pods, join for TLS bootstrap);
    # both nodes are Ready as a user sees it.
    ready = await wait_nodes_ready(KUBECTL, cluster.admin_kubeconfig, [first.name, second.name], timeout=120)
    print(f"init {cluster.timings['init']:.1f}s join {cluster.timings[f'join:{second.name}']:.1f}s ready +{ready:.1f}s")

    # The control plane runs as nodeagent's static pods, with their mirror pods on the first node.
    by_component = control_plane_pods(cluster)
    for component in CONTROL_PLANE:
        assert component in by_component, sorted(by_component)
        pod = by_component[component]
        assert pod["spec"]["nodeName"] == first.name
        assert pod["spec"]["hostNetwork"] is True
        assert pod["spec"]["priorityClassName"] == "system-node-critical"
        assert pod["metadata"]["annotations"]["kubernetes.io/config.source"] == "file"
        assert any("hostPath" in v for v in pod["spec"]["volumes"])
        assert pod["status"]["phase"] == "Running"
        assert all(c["ready"] for c in pod["status"]["containerStatuses"]), pod["status"]
    # The joined node got its client certificate through a CSR that the csrapproving controller approved.
    csrs = kubectl_json(cluster, "get", "csr")["items"]
    assert any(
        c["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
        and c["spec"]["username"].startswith("system:bootstrap:")
        and any(cond["type"] == "Approved" for cond in c["status"].get("conditions", []))
        for c in csrs
    ), csrs
    assert (cluster.node_root(1) / "var-lib-kubelet" / "pki" / "kubelet-client-current.pem").is_symlink()

    # A Deployment spread over both nodes (tolerating the control plane's taint) runs on both.
    image = f"{state.registry}/pause:3.10.1"
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "spread", "namespace": "default"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "spread"}},
            "template": {
                "metadata": {"labels": {"app": "spread"}},
                "spec": {
                    "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}],
                    "topologySpreadConstraints": [
                        {
                            "maxSkew": 1,
                            "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {"matchLabels": {"app": "spread"}},
                        }
                    ],
                    "containers": [{"name": "pause", "image": image}],
                },
            },
        },
    }
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(deployment))
    kubectl(cluster, "rollout", "status", "deployment/spread", "--timeout=90s")
    running = kubectl_json(cluster, "get", "pods", "-l", "app=spread")["items"]
    assert {p["spec"]["nodeName"] for p in running if p["status"]["phase"] == "Running"} == {first.name, second.name}
    for pod in running:
        node = first if pod["spec"]["nodeName"] == first.name else second
        assert hostnet_contains(node.pod_cidr, pod["status"]["podIP"]), (pod["status"]["podIP"], node.pod_cidr)

    # Pods on different nodes reach each other (cluster/nodenet.py: routed over the cluster's fabric): a client on the
    # second node fetches a page from an httpd on the first. busybox's nc, not its wget: Debian's static busybox wget
    # crashes (SIGSEGV) in pods.
    busybox = images.build_busybox_image(cache_root() / "images" / "busybox")
    await registry.push_image(state.registry, "busybox", "1.35", busybox)
    box = f"{state.registry}/busybox:1.35"
    server = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "server", "namespace": "default"},
        "spec": {
            "nodeName": first.name,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "httpd",
                    "image": box,
                    "command": ["sh", "-c", "echo across-nodes > /tmp/index.html; exec httpd -f -p 8080 -h /tmp"],
                    "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                }
            ],
        },
    }
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(server))
    kubectl(cluster, "wait", "--for=condition=Ready", "pod/server", "--timeout=60s")
    server_ip = kubectl_json(cluster, "get", "pod", "server")["status"]["podIP"]
    fetch = f"printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {server_ip} 8080"
    client = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "client", "namespace": "default"},
        "spec": {
            "nodeName": second.name,
            "restartPolicy": "Never",
            "containers": [{"name": "nc", "image": box, "command": ["sh", "-c", fetch]}],
        },
    }
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(client))
    kubectl(cluster, "wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/client", "--timeout=60s")
    assert "across-nodes" in kubectl(cluster, "logs", "client")

    # Bad input: a join with a wrong CA hash fails in discovery with kubeadm's message, and leaves no Node.
    with pytest.raises(ClusterError) as failed:
        await cluster.add_node(ca_cert_hash=WRONG_HASH)
    assert "none of the public keys" in str(failed.value) and "are pinned" in str(failed.value), str(failed.value)
    bad = cluster.state().nodes[-1].name
    names = {n["metadata"]["name"] for n in kubectl_json(cluster, "get", "nodes")["items"]}
    assert names == {first.name, second.name}, f"{bad} must not be registered: {names}"

    # What reset must remove, recorded while it exists.
    netns = pod_netns(cluster)
    assert netns, "the Deployment's pods have network namespaces"
    nodes = cluster.nodes(cluster.state())
    bridges = [node.settings.bridge for node in nodes] + [cluster.state().fabric.bridge]
    # The pods' veths are on their nodes' bridges inside the nodes' namespaces; the host holds each node's veth.
    veths = [node.veth for node in nodes]
    assert set(veths) <= set(bridge_veths(cluster.state().fabric.bridge)), "every node's veth is on the fabric"
    cgroup_roots = [plan.cgroup_root for plan in cluster.state().nodes]

    removed = await cluster.down()
    print(f"down removed {len(removed)} leftovers; total {time.monotonic() - started:.0f}s")
    assert leftovers(cluster.root, netns, bridges, veths, cgroup_roots) == []


CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def control_plane_pods(cluster: Cluster, timeout: float = 90) -> dict[str, Any]:
    """The control plane's mirror pods by component, once all four exist and are Running with their containers
    ready: a Ready node does not mean its mirror pods are posted yet (under a load average of 20 one was missing)."""
    deadline = time.monotonic() + timeout
    while True:
        pods = kubectl_json(cluster, "-n", "kube-system", "get", "pods")["items"]
        found = {p["metadata"]["labels"].get("component"): p for p in pods}
        ready = [
            c
            for c in CONTROL_PLANE
            if c in found
            and found[c]["status"].get("phase") == "Running"
            and all(s["ready"] for s in found[c]["status"].get("containerStatuses", [{"ready": False}]))
        ]
        if len(ready) == len(CONTROL_PLANE) or time.monotonic() > deadline:
            return found
        time.sleep(1)


def leftovers(root: Path, netns: list[str], bridges: list[str], veths: list[str], cgroup_roots: list[str]) -> list[str]:
    """Whatever of the cluster is still there: processes, mounts, netns, bridges, veths, cgroups."""
    found = processes_under(root)
    found += [line for line in Path("/proc/self/mounts").read_text().splitlines() if str(root) in line]
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    found += [f"netns {n}" for n in netns if n in listed]
    found += [f"bridge {b}" for b in bridges if hostnet.link_exists(b)]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    found += [f"veth {v}" for v in veths if f" {v}@" in links or f" {v}:" in links]
    found += [f"cgroup {p}" for root_ in cgroup_roots for p in leftover_cgroups(root_)]
    forward = subprocess.run(["iptables", "-w", "-S", "FORWARD"], capture_output=True, text=True, check=True).stdout
    found += [line for line in forward.splitlines() if any(b in line for b in bridges)]
    return found


def hostnet_contains(cidr: str, ip: str) -> bool:
    import ipaddress  # noqa: PLC0415

    return ipaddress.IPv4Address(ip) in ipaddress.IPv4Network(cidr)
