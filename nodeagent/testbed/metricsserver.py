"""metrics-server in the testbed, registered through the aggregation layer, so that `kubectl top` works.

As a cluster runs it (upstream's manifests/base), except that it is a process on the host rather than a pod:

```
 kubectl top ─► kube-apiserver ──(APIService v1beta1.metrics.k8s.io, front-proxy client cert, X-Remote-User)──┐
                  │ --enable-aggregator-routing: dials the Service's EndpointSlice (the node address), not its   │
                  │ ClusterIP, as the testbed has no service proxy                                               ▼
                  │                                              metrics-server on NODE_IP:port (serving cert from
                  │                                              the testbed CA, checked against the APIService's
                  │                                              caBundle as metrics-server.kube-system.svc)
                  └─ TokenReview/SubjectAccessReview ◄── delegated authn/authz ──┘  │ every 15 s
                                                            agent's /metrics/resource ◄┘ (InternalIP, the port in
                                                            the Node's status, the agent's cert verified)
```

Its identity is a client certificate (user `system:metrics-server`) bound to the roles upstream binds to its
ServiceAccount: a certificate needs no token controller and no refresh, so metrics-server starts right after the
apiserver. The agent authenticates it by that certificate and authorizes `nodes/metrics` with a SubjectAccessReview.
The Service has no selector: its EndpointSlice, written here, holds the node address (an EndpointSlice may not hold
a loopback one, which is why the testbed's node has an address of its own).
"""

from __future__ import annotations

import base64
import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeagent.clock import Clock, SystemClock
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import AlreadyExists, ApiError, ApiUnavailable, NotFound
from nodeagent.testbed.layout import Layout, Settings

Obj = dict[str, Any]

NAME = "metrics-server"
NAMESPACE = "kube-system"
USER = "system:metrics-server"
API_SERVICE = "v1beta1.metrics.k8s.io"
SERVICE_PORT = 443
# Upstream's manifests' value. It must exceed the kubelet request timeout (10 s), which metrics-server checks.
METRIC_RESOLUTION = "15s"
RBAC = "rbac.authorization.k8s.io"
# Where metrics-server's serving certificate must be valid: the name the aggregator verifies, and the address.
SERVICE_DNS_NAMES = (f"{NAME}.{NAMESPACE}.svc", f"{NAME}.{NAMESPACE}.svc.cluster.local")
# The aggregator's proxy client (upstream's kubeadm name): the only name metrics-server accepts request headers from.
FRONT_PROXY_CLIENT = "front-proxy-client"


class MetricsServerError(RuntimeError):
    """metrics-server could not be registered with the apiserver."""


@dataclass(frozen=True)
class Files:
    """What metrics-server reads: its kubeconfig (its identity), its serving pair, and the CA of the kubelets."""

    kubeconfig: Path
    tls_cert: Path
    tls_key: Path
    kubelet_ca: Path


def argv(binary: str, settings: Settings, files: Files) -> list[str]:
    return [
        binary,
        f"--kubeconfig={files.kubeconfig}",
        # Delegated authn/authz (TokenReview, SubjectAccessReview, the requestheader CA from the
        # extension-apiserver-authentication ConfigMap) with the same identity.
        f"--authentication-kubeconfig={files.kubeconfig}",
        f"--authorization-kubeconfig={files.kubeconfig}",
        f"--bind-address={settings.node_ip}",
        f"--secure-port={settings.metrics_server_port}",
        f"--tls-cert-file={files.tls_cert}",
        f"--tls-private-key-file={files.tls_key}",
        "--kubelet-preferred-address-types=InternalIP",
        # The agent's port as its Node status reports it (daemonEndpoints), as upstream's manifest does.
        "--kubelet-use-node-status-port",
        # The agent's serving certificate is verified, never skipped.
        f"--kubelet-certificate-authority={files.kubelet_ca}",
        f"--metric-resolution={METRIC_RESOLUTION}",
        "--profiling=false",
        "--v=1",
    ]


def rbac_objects() -> list[tuple[str, Obj]]:
    """Upstream's manifests/base/rbac.yaml, its subjects the certificate's user instead of the ServiceAccount."""
    user = [{"kind": "User", "apiGroup": RBAC, "name": USER}]
    return [
        (
            paths.api_path("clusterroles", group=RBAC),
            {
                "metadata": {
                    "name": "system:aggregated-metrics-reader",
                    "labels": {
                        f"{RBAC}/aggregate-to-view": "true",
                        f"{RBAC}/aggregate-to-edit": "true",
                        f"{RBAC}/aggregate-to-admin": "true",
                    },
                },
                "rules": [
                    {"apiGroups": ["metrics.k8s.io"], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]}
                ],
            },
        ),
        (
            paths.api_path("clusterroles", group=RBAC),
            {
                "metadata": {"name": "system:metrics-server"},
                "rules": [
                    {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
                    {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]},
                ],
            },
        ),
        (
            paths.api_path("clusterrolebindings", group=RBAC),
            {
                "metadata": {"name": "system:metrics-server"},
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "system:metrics-server"},
                "subjects": user,
            },
        ),
        (
            paths.api_path("clusterrolebindings", group=RBAC),
            {
                "metadata": {"name": "metrics-server:system:auth-delegator"},
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "system:auth-delegator"},
                "subjects": user,
            },
        ),
        (
            paths.api_path("rolebindings", group=RBAC, namespace=NAMESPACE),
            {
                "metadata": {"name": "metrics-server-auth-reader", "namespace": NAMESPACE},
                "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "extension-apiserver-authentication-reader"},
                "subjects": user,
            },
        ),
    ]


def service_objects(settings: Settings) -> list[tuple[str, Obj]]:
    """The Service the APIService names, without a selector, and its EndpointSlice: the node address and the
    port metrics-server listens on."""
    return [
        (
            paths.api_path("services", namespace=NAMESPACE),
            {
                "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": {"k8s-app": NAME}},
                "spec": {
                    "ports": [
                        {
                            "name": "https",
                            "port": SERVICE_PORT,
                            "protocol": "TCP",
                            "targetPort": settings.metrics_server_port,
                            "appProtocol": "https",
                        }
                    ]
                },
            },
        ),
        (
            paths.api_path("endpointslices", group="discovery.k8s.io", namespace=NAMESPACE),
            {
                "metadata": {
                    "name": f"{NAME}-testbed",
                    "namespace": NAMESPACE,
                    "labels": {
                        "kubernetes.io/service-name": NAME,
                        # Not the endpointslice controller's: it leaves a slice of another manager alone.
                        "endpointslice.kubernetes.io/managed-by": "testbed.nodeagent.io",
                    },
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [settings.node_ip], "conditions": {"ready": True}}],
                "ports": [{"name": "https", "port": settings.metrics_server_port, "protocol": "TCP"}],
            },
        ),
    ]


def api_service(ca_bundle: bytes) -> tuple[str, Obj]:
    """Upstream's manifests/base/apiservice.yaml, with the CA instead of insecureSkipTLSVerify."""
    return (
        paths.api_path("apiservices", group="apiregistration.k8s.io"),
        {
            "metadata": {"name": API_SERVICE, "labels": {"k8s-app": NAME}},
            "spec": {
                "service": {"name": NAME, "namespace": NAMESPACE, "port": SERVICE_PORT},
                "group": "metrics.k8s.io",
                "version": "v1beta1",
                "caBundle": base64.b64encode(ca_bundle).decode(),
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        },
    )


def available(api_service_object: Obj) -> bool:
    conditions = (api_service_object.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions)


async def create_all(
    admin: KubeClient, objects: list[tuple[str, Obj]], *, clock: Clock | None = None, timeout: float = 30.0
) -> None:
    """Create each object once. Right after /readyz the kube-system namespace or a bootstrap role can still be on
    its way, so NotFound and an unavailable apiserver are retried (every 0.2 s) until `timeout`."""
    clock = clock or SystemClock()
    deadline = clock.monotonic() + timeout
    for path, body in objects:
        what = f"{path}/{body['metadata']['name']}"
        while True:
            try:
                await admin.create(path, body)
                break
            except AlreadyExists:
                break
            except (NotFound, ApiUnavailable) as exc:
                if clock.monotonic() >= deadline:
                    raise MetricsServerError(f"creating {what}: {exc}") from exc
                await clock.sleep(0.2)
            except ApiError as exc:
                raise MetricsServerError(f"creating {what}: {exc}") from exc


async def register(layout: Layout, settings: Settings) -> None:
    """RBAC, the Service and its EndpointSlice: what metrics-server needs before it starts."""
    async with KubeClient.from_kubeconfig(layout.admin_kubeconfig) as admin:
        await create_all(admin, rbac_objects() + service_objects(settings))


async def register_api_service(layout: Layout) -> None:
    """The APIService, once metrics-server listens (the aggregator's first availability check then succeeds)."""
    async with KubeClient.from_kubeconfig(layout.admin_kubeconfig) as admin:
        await create_all(admin, [api_service((layout.pki / "ca.crt").read_bytes())])


async def api_service_available(layout: Layout) -> bool:
    async with KubeClient.from_kubeconfig(layout.admin_kubeconfig) as admin:
        with contextlib.suppress(NotFound):
            return available(
                await admin.get(paths.api_path("apiservices", group="apiregistration.k8s.io", name=API_SERVICE))
            )
    return False
