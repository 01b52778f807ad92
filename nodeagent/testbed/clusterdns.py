"""Cluster DNS for the testbed: CoreDNS as kubeadm deploys it, so pods resolve Services by name.

The objects are kubeadm's `addon/coredns` ones (cmd/kubeadm/app/phases/addons/dns): the `coredns` ServiceAccount,
the `system:coredns` ClusterRole and its binding, the `coredns` ConfigMap with the Corefile, the `coredns`
Deployment (image built here, testbed/coredns.py) and the `kube-dns` Service with the 10th address of the Service
range. The agent's KubeletConfiguration names that address as `clusterDNS` (configs.agent_config), and the
upstream kubelet the testbed can hand the node to reads the same file.

Differences from kubeadm, each for this machine:
- one replica: the testbed has one node, and kubeadm's second replica would only wait for an anti-affinity it
  prefers;
- a readiness probe every 2 s rather than every 10: `nodeagent up` waits for the replica to be Ready;
- no `forward` (and so no `loop`, which guards forwarding): the only upstream a pod could use is the host's
  resolv.conf, whose server is off the machine, and no testbed traffic may leave it. The `kubernetes` plugin
  answers cluster.local and the reverse zones; any other name fails at once (SERVFAIL, from the end of the plugin
  chain) rather than after a resolver's timeout.

`Testbed.up(cluster_dns=True)` creates the objects (`deploy`), before any node exists; the scheduler places the pod
once an agent registers. CoreDNS reaches the apiserver at the `kubernetes` Service with its token, so it is served
only in the testbed that runs the host's kube-proxy (testbed/kubeproxy.py).
"""

from __future__ import annotations

import contextlib
from typing import Any

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import coredns, metricsserver
from nodeagent.testbed.layout import Layout

Obj = dict[str, Any]

NAMESPACE = "kube-system"
NAME = "coredns"
SERVICE = "kube-dns"
CLUSTER_DOMAIN = "cluster.local"
APP_LABEL = {"k8s-app": SERVICE}
# Under upstream's path (registry.k8s.io/coredns/coredns), at the version built here.
IMAGE_REPOSITORY = "coredns/coredns"
IMAGE_TAG = coredns.COREDNS_VERSION
RBAC = "rbac.authorization.k8s.io"
HEALTH_PORT = 8080
READY_PORT = 8181
METRICS_PORT = 9153
LIST_WATCH = ["list", "watch"]
READINESS_PERIOD_SECONDS = 2


class ClusterDNSError(RuntimeError):
    """The cluster DNS objects could not be created."""


def corefile(domain: str = CLUSTER_DOMAIN) -> str:
    """kubeadm's Corefile without `forward` and `loop` (see the module docstring)."""
    return (
        ".:53 {\n"
        "    errors\n"
        "    health {\n"
        "       lameduck 5s\n"
        "    }\n"
        "    ready\n"
        f"    kubernetes {domain} in-addr.arpa ip6.arpa {{\n"
        "       pods insecure\n"
        "       fallthrough in-addr.arpa ip6.arpa\n"
        "       ttl 30\n"
        "    }\n"
        f"    prometheus :{METRICS_PORT}\n"
        "    cache 30 {\n"
        f"       disable success {domain}\n"
        f"       disable denial {domain}\n"
        "    }\n"
        "    reload\n"
        "    loadbalance\n"
        "}\n"
    )


def image(registry: str) -> str:
    return f"{registry}/{IMAGE_REPOSITORY}:{IMAGE_TAG}"


def rbac_objects() -> list[tuple[str, Obj]]:
    return [
        (
            paths.api_path("serviceaccounts", namespace=NAMESPACE),
            {"metadata": {"name": NAME, "namespace": NAMESPACE}},
        ),
        (
            paths.api_path("clusterroles", group=RBAC),
            {
                "metadata": {"name": "system:coredns"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["endpoints", "services", "pods", "namespaces"],
                        "verbs": LIST_WATCH,
                    },
                    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": LIST_WATCH},
                ],
            },
        ),
        (
            paths.api_path("clusterrolebindings", group=RBAC),
            {
                "metadata": {"name": "system:coredns"},
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "system:coredns"},
                "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
            },
        ),
    ]


def config_map(domain: str = CLUSTER_DOMAIN) -> tuple[str, Obj]:
    return (
        paths.api_path("configmaps", namespace=NAMESPACE),
        {"metadata": {"name": NAME, "namespace": NAMESPACE}, "data": {"Corefile": corefile(domain)}},
    )


def service(cluster_ip: str) -> tuple[str, Obj]:
    return (
        paths.api_path("services", namespace=NAMESPACE),
        {
            "metadata": {
                "name": SERVICE,
                "namespace": NAMESPACE,
                "labels": {**APP_LABEL, "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"},
                "annotations": {"prometheus.io/port": str(METRICS_PORT), "prometheus.io/scrape": "true"},
            },
            "spec": {
                "selector": dict(APP_LABEL),
                "clusterIP": cluster_ip,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                    {"name": "metrics", "port": METRICS_PORT, "protocol": "TCP", "targetPort": METRICS_PORT},
                ],
            },
        },
    )


def deployment(image_ref: str) -> tuple[str, Obj]:
    """kubeadm's Deployment, one replica."""
    container = {
        "name": NAME,
        "image": image_ref,
        "imagePullPolicy": "IfNotPresent",
        "resources": {"limits": {"memory": "170Mi"}, "requests": {"cpu": "100m", "memory": "70Mi"}},
        "args": ["-conf", "/etc/coredns/Corefile"],
        "volumeMounts": [{"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": True}],
        "ports": [
            {"containerPort": 53, "name": "dns", "protocol": "UDP"},
            {"containerPort": 53, "name": "dns-tcp", "protocol": "TCP"},
            {"containerPort": METRICS_PORT, "name": "metrics", "protocol": "TCP"},
        ],
        "livenessProbe": {
            "httpGet": {"path": "/health", "port": HEALTH_PORT, "scheme": "HTTP"},
            "initialDelaySeconds": 60,
            "timeoutSeconds": 5,
            "successThreshold": 1,
            "failureThreshold": 5,
        },
        # Every 2 s, not kubeadm's default 10: the first probe comes before the kubernetes plugin has synced, and
        # `nodeagent up` waits for the next one (measured: 20 s from the node Ready to CoreDNS Ready with 10 s).
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": READY_PORT, "scheme": "HTTP"},
            "periodSeconds": READINESS_PERIOD_SECONDS,
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
    }
    return (
        paths.api_path("deployments", group="apps", namespace=NAMESPACE),
        {
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(APP_LABEL)},
            "spec": {
                "replicas": 1,
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                "selector": {"matchLabels": dict(APP_LABEL)},
                "template": {
                    "metadata": {"labels": dict(APP_LABEL)},
                    "spec": {
                        "priorityClassName": "system-cluster-critical",
                        "serviceAccountName": NAME,
                        "tolerations": [
                            {"key": "CriticalAddonsOnly", "operator": "Exists"},
                            {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
                        ],
                        "nodeSelector": {"kubernetes.io/os": "linux"},
                        "containers": [container],
                        # Its own resolver is the node's (kubeadm's choice): ClusterFirst would point it at itself.
                        "dnsPolicy": "Default",
                        "volumes": [
                            {
                                "name": "config-volume",
                                "configMap": {"name": NAME, "items": [{"key": "Corefile", "path": "Corefile"}]},
                            }
                        ],
                    },
                },
            },
        },
    )


def objects(cluster_ip: str, registry: str) -> list[tuple[str, Obj]]:
    """Every object, in kubeadm's order: RBAC and the ConfigMap before the Deployment that uses them."""
    return [*rbac_objects(), config_map(), deployment(image(registry)), service(cluster_ip)]


async def deploy(layout: Layout, cluster_ip: str, registry: str) -> None:
    async with KubeClient.from_kubeconfig(layout.admin_kubeconfig) as admin:
        try:
            await metricsserver.create_all(admin, objects(cluster_ip, registry))
        except metricsserver.MetricsServerError as exc:  # create_all's error, whichever objects it creates
            raise ClusterDNSError(str(exc)) from exc


def ready_replicas(deployment_object: Obj) -> int:
    return int((deployment_object.get("status") or {}).get("readyReplicas") or 0)


async def ready(layout: Layout) -> bool:
    """Whether a CoreDNS replica is Ready (and so an endpoint of the `kube-dns` Service)."""
    async with KubeClient.from_kubeconfig(layout.admin_kubeconfig) as admin:
        with contextlib.suppress(NotFound):
            return ready_replicas(await admin.get(deployment_path())) > 0
    return False


def deployment_path() -> str:
    return paths.api_path("deployments", group="apps", namespace=NAMESPACE, name=NAME)
