"""The network of a 3-node `cluster up` as a real cluster's nodes see it (issue 30), end to end.

Each node has a network namespace of its own (nodeagent/cluster/nodenet.py): its own address on the cluster's fabric,
its own iptables, its own ports. So, as on any conformant cluster:
- a NodePort answers on every node's address, from the host and from a pod on another node (each node's kube-proxy,
  kubeadm's DaemonSet on every node);
- a hostPort answers on its own node's address with its own pod (each node's portmap rules are its node's);
- every kubelet serves 10250 on its node's address, and the apiserver's node proxy reaches it there (the e2e
  framework's failure dump goes to port 10250 of every node);
- the apiserver reaches a webhook Service's ClusterIP whose endpoint is a pod on another node;
- CoreDNS answers Service and pod names from every node;
- the host's iptables carry none of the cluster's kube-proxy chains; `cluster down` leaves nothing.

On the code before nodenet.py (every node in the host's network namespace, one kube-proxy pinned to the first node,
workers' kubelets on random ports) the NodePort on the workers' addresses, the per-node hostPorts and 10250 on the
workers all failed.

Marker `cluster` (as test_kubeadm_addons.py): minutes of kubeadm on 2 cores, run as scripts/test-all.sh's cluster
step.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from nodeagent.cluster.cluster import Cluster, ClusterError, wait_nodes_ready
from nodeagent.testbed import configs, images, registry
from nodeagent.testbed.versions import agnhost_path, busybox_path, cache_root
from tests.integration.clusterkit import temporary_cluster
from tests.integration.test_kubeadm_addons import host_rules_naming
from tests.integration.test_kubeadm_cluster import KUBECTL, kubectl, kubectl_json, leftovers, pod_netns

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

HOST_PORT = 18080
WEB_PORT = 8080


@pytest_asyncio.fixture
async def cluster() -> AsyncIterator[Cluster]:
    async with temporary_cluster("nodeagent-cluster-net-") as made:
        yield made


def web_pod(name: str, node: str, image: str) -> dict[str, Any]:
    """agnhost netexec on `node`, answering /hostname with its pod name, on a hostPort too."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "web",
                    "image": image,
                    "args": ["netexec", f"--http-port={WEB_PORT}"],
                    "ports": [{"containerPort": WEB_PORT, "hostPort": HOST_PORT}],
                    "readinessProbe": {"httpGet": {"path": "/hostname", "port": WEB_PORT}, "periodSeconds": 1},
                }
            ],
        },
    }


def client_pod(name: str, node: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "client", "image": image, "args": ["pause"]}],
        },
    }


def service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "type": "NodePort",
            "selector": {"app": "web"},
            "ports": [
                {"name": "http", "port": 80, "targetPort": WEB_PORT},
                # For the webhook below: HTTPS expected, plain HTTP behind it.
                {"name": "https", "port": 443, "targetPort": WEB_PORT},
            ],
        },
    }


def webhook() -> dict[str, Any]:
    """A validating webhook on the `web` Service's 443 for ConfigMaps in namespaces labelled h6-probe=yes."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "cluster-network-probe"},
        "webhooks": [
            {
                "name": "probe.cluster-network.example.com",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 5,
                "clientConfig": {"service": {"namespace": "default", "name": "web", "port": 443, "path": "/"}},
                "namespaceSelector": {"matchLabels": {"cluster-network-probe": "yes"}},
                "rules": [
                    {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}
                ],
            }
        ],
    }


def fetch(url: str) -> str:
    """GET from the host; the body, or what went wrong."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as answer:
            return str(answer.read().decode())
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except OSError as exc:
        return f"error: {exc}"


def fetch_in(cluster: Cluster, pod: str, url: str) -> str:
    """GET with curl from inside `pod`; the body, or curl's failure."""
    proc = subprocess.run(
        [str(KUBECTL), f"--kubeconfig={cluster.admin_kubeconfig}", "exec", pod, "--", "curl", "-s", "-m", "5", url],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return proc.stdout.strip() if proc.returncode == 0 else f"curl exit {proc.returncode} {proc.stderr.strip()}"


def fetch_until_web(url: str, timeout: float = 30) -> str:
    """`fetch` until a web pod answers (kube-proxy syncs a Service a moment after it exists); the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        answer = fetch(url)
        if answer.startswith("web") or time.monotonic() > deadline:
            return answer
        time.sleep(1)


def create_configmap_error(cluster: Cluster, namespace: str) -> str:
    """What kubectl says when creating a ConfigMap in `namespace` (the webhook refuses it one way or another)."""
    proc = subprocess.run(
        [str(KUBECTL), f"--kubeconfig={cluster.admin_kubeconfig}", "-n", namespace, "create", "configmap", "x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.stderr.strip()


def host_routes() -> str:
    return subprocess.run(["ip", "route"], capture_output=True, text=True, check=True).stdout


async def test_each_node_has_its_own_address_iptables_and_ports(cluster: Cluster) -> None:
    started = time.monotonic()
    try:
        await cluster.up(3)
    except ClusterError as exc:
        pytest.fail(f"cluster up: {exc}")
    state = cluster.state()
    names = [n.name for n in state.nodes]
    ready = await wait_nodes_ready(KUBECTL, cluster.admin_kubeconfig, names, timeout=180)
    print(f"up {time.monotonic() - started:.0f}s (ready +{ready:.0f}s) timings {cluster.timings}")

    # One kube-proxy per node (kubeadm's DaemonSet as it is), each Running on its node.
    kubectl(cluster, "-n", "kube-system", "rollout", "status", "daemonset/kube-proxy", "--timeout=120s")
    proxies = kubectl_json(cluster, "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-proxy")["items"]
    assert sorted(p["spec"]["nodeName"] for p in proxies if p["status"]["phase"] == "Running") == sorted(names)
    kubectl(cluster, "-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=120s")

    # Every node's address is its own, on the fabric, and is the InternalIP the cluster knows.
    addresses = {
        n["metadata"]["name"]: next(a["address"] for a in n["status"]["addresses"] if a["type"] == "InternalIP")
        for n in kubectl_json(cluster, "get", "nodes")["items"]
    }
    assert addresses == {n.name: n.address for n in state.nodes}
    assert len(set(addresses.values())) == 3

    agnhost = images.build_agnhost_image(cache_root() / "images" / "agnhost", agnhost_path(), busybox_path())
    await registry.push_image(state.registry, configs.AGNHOST_IMAGE_REPOSITORY, configs.AGNHOST_IMAGE_TAG, agnhost)
    image = f"{state.registry}/{configs.AGNHOST_IMAGE_REPOSITORY}:{configs.AGNHOST_IMAGE_TAG}"
    objects = [service()]
    for index, name in enumerate(names):
        objects += [web_pod(f"web{index}", name, image), client_pod(f"client{index}", name, image)]
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    kubectl(cluster, "wait", "--for=condition=Ready", "pod", "--all", "--timeout=120s")
    node_port = kubectl_json(cluster, "get", "service", "web")["spec"]["ports"][0]["nodePort"]

    failures: list[str] = []
    for index, name in enumerate(names):
        address = addresses[name]
        # NodePort on every node's address: from the host, and from a pod on another node.
        answer = fetch_until_web(f"http://{address}:{node_port}/hostname")
        if not answer.startswith("web"):
            failures.append(f"NodePort on {name} from the host: {answer}")
        other = f"client{(index + 1) % 3}"
        answer = fetch_in(cluster, other, f"http://{address}:{node_port}/hostname")
        if not answer.startswith("web"):
            failures.append(f"NodePort on {name} from {other}: {answer}")
        # The hostPort on a node's address is that node's pod, from the host and from a pod on another node.
        for source, answer in (
            ("host", fetch(f"http://{address}:{HOST_PORT}/hostname")),
            (other, fetch_in(cluster, other, f"http://{address}:{HOST_PORT}/hostname")),
        ):
            if answer != f"web{index}":
                failures.append(f"hostPort {HOST_PORT} on {name} from {source}: {answer!r}, not web{index}")
        # The kubelet on 10250 of every node (401: it is there and wants credentials), and through the node proxy.
        code = fetch(f"https://{address}:10250/pods")
        if code != "HTTP 401":
            failures.append(f"kubelet {name} {address}:10250: {code}")
        pods = json.loads(kubectl(cluster, "get", "--raw", f"/api/v1/nodes/{name}:10250/proxy/pods"))
        if f"web{index}" not in {p["metadata"]["name"] for p in pods["items"]}:
            failures.append(f"node proxy {name}:10250/pods lists no web{index}")
    endpoint = kubectl_json(cluster, "get", "node", names[1])["status"]["daemonEndpoints"]["kubeletEndpoint"]
    if endpoint["Port"] != 10250:
        failures.append(f"{names[1]} kubeletEndpoint {endpoint}")

    # Pods reach pods and the Service from every node; CoreDNS answers Service and pod names.
    cluster_ip = kubectl_json(cluster, "get", "service", "web")["spec"]["clusterIP"]
    web1_ip = kubectl_json(cluster, "get", "pod", "web1")["status"]["podIP"]
    for index in range(3):
        client = f"client{index}"
        for url in (f"http://{web1_ip}:{WEB_PORT}/hostname", f"http://{cluster_ip}/hostname"):
            answer = fetch_in(cluster, client, url)
            if not answer.startswith("web"):
                failures.append(f"{client} -> {url}: {answer}")
        for name, expected in (
            ("web.default.svc.cluster.local", cluster_ip),
            (f"{web1_ip.replace('.', '-')}.default.pod.cluster.local", web1_ip),
        ):
            lookup = kubectl(cluster, "exec", client, "--", "nslookup", name)
            if f"Address: {expected}" not in lookup:
                failures.append(f"{client} nslookup {name}: {lookup!r}")

    # The apiserver (hostNetwork, on the first node) reaches a webhook Service: "HTTP response to HTTPS client"
    # comes from the pod behind the ClusterIP's 443 (netexec speaks plain HTTP), so the connection was made.
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(webhook()))
    kubectl(cluster, "create", "namespace", "probe")
    kubectl(cluster, "label", "namespace", "probe", "cluster-network-probe=yes")
    refused = create_configmap_error(cluster, "probe")
    if "server gave HTTP response to HTTPS client" not in refused:
        failures.append(f"webhook through the ClusterIP: {refused}")
    assert failures == [], "\n".join(failures)

    # The cluster's kube-proxies wrote their nodes' iptables, never the host's.
    dns_ip = kubectl_json(cluster, "-n", "kube-system", "get", "service", "kube-dns")["spec"]["clusterIP"]
    assert host_rules_naming([cluster_ip, dns_ip]) == []

    netns = pod_netns(cluster)
    bridges = [node.settings.bridge for node in cluster.nodes(state)] + [state.fabric.bridge]
    cgroup_roots = [plan.cgroup_root for plan in state.nodes]
    await cluster.down()
    assert leftovers(cluster.root, netns, bridges, [n.veth for n in cluster.nodes(state)], cgroup_roots) == []
    routes = host_routes()
    assert not [n.pod_cidr for n in state.nodes if n.pod_cidr in routes], routes
    print(f"total {time.monotonic() - started:.0f}s")
