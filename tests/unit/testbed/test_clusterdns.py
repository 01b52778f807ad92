"""The testbed's cluster DNS objects: kubeadm's CoreDNS addon, one replica, nothing forwarded off the machine."""

from __future__ import annotations

from typing import Any

from nodeagent.testbed import clusterdns, coredns

REGISTRY = "127.0.0.1:20006"
DNS_IP = "198.19.0.10"


def _by_kind() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for path, body in clusterdns.objects(DNS_IP, REGISTRY):
        found[path.rsplit("/", 1)[1]] = body
    return found


def test_objects_are_kubeadms_in_its_order() -> None:
    paths = [path for path, _ in clusterdns.objects(DNS_IP, REGISTRY)]
    assert paths == [
        "/api/v1/namespaces/kube-system/serviceaccounts",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        "/api/v1/namespaces/kube-system/configmaps",
        "/apis/apps/v1/namespaces/kube-system/deployments",
        "/api/v1/namespaces/kube-system/services",
    ]


def test_the_kube_dns_service_has_the_given_cluster_ip_and_selects_the_deployments_pods() -> None:
    objs = _by_kind()
    service, deployment = objs["services"], objs["deployments"]
    assert service["metadata"]["name"] == "kube-dns"
    assert service["spec"]["clusterIP"] == DNS_IP
    assert {(p["port"], p["protocol"]) for p in service["spec"]["ports"]} == {(53, "UDP"), (53, "TCP"), (9153, "TCP")}
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert deployment["spec"]["selector"]["matchLabels"] == labels


def test_the_deployment_runs_the_image_built_here_as_kubeadm_runs_it() -> None:
    deployment = _by_kind()["deployments"]
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert deployment["spec"]["replicas"] == 1
    assert container["image"] == f"{REGISTRY}/coredns/coredns:{coredns.COREDNS_VERSION}"
    assert container["args"] == ["-conf", "/etc/coredns/Corefile"]
    assert spec["serviceAccountName"] == "coredns"
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["dnsPolicy"] == "Default"
    assert container["securityContext"]["capabilities"] == {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}
    assert container["readinessProbe"]["httpGet"]["port"] == clusterdns.READY_PORT
    assert spec["volumes"][0]["configMap"]["name"] == "coredns"


def test_rbac_lets_coredns_list_and_watch_what_the_kubernetes_plugin_reads() -> None:
    objs = _by_kind()
    rules = objs["clusterroles"]["rules"]
    granted = {(group, resource) for r in rules for group in r["apiGroups"] for resource in r["resources"]}
    assert {("", "services"), ("", "namespaces"), ("discovery.k8s.io", "endpointslices")} <= granted
    assert all(r["verbs"] == ["list", "watch"] for r in rules)
    assert objs["clusterrolebindings"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}
    ]


def test_the_corefile_serves_the_cluster_domain_and_forwards_nothing() -> None:
    text = _by_kind()["configmaps"]["data"]["Corefile"]
    assert "kubernetes cluster.local in-addr.arpa ip6.arpa {" in text
    for plugin in ("errors", "health", "ready", "cache 30", "reload", "loadbalance", "prometheus :9153"):
        assert plugin in text
    # No upstream resolver: the host's is off the machine, and nothing of a testbed may leave it.
    assert "forward" not in text and "loop" not in text
    assert text.count("{") == text.count("}")


def test_ready_replicas_reads_the_deployments_status() -> None:
    assert clusterdns.ready_replicas({}) == 0
    assert clusterdns.ready_replicas({"status": {"replicas": 1}}) == 0
    assert clusterdns.ready_replicas({"status": {"readyReplicas": 1}}) == 1
