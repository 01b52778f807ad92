"""metrics-server's registration: upstream's RBAC and APIService, a Service whose EndpointSlice is the node address,
flags that verify the agent's certificate, and creation that waits out a namespace still on its way."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from nodeagent.kube.client import KubeClient
from nodeagent.kube.kubeconfig import ClusterCredentials
from nodeagent.testbed import install, metricsserver, versions
from nodeagent.testbed.layout import Settings

Obj = dict[str, Any]


def _ms_settings() -> Settings:
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
        pod_cidr="198.18.7.0/24",
        service_cidr="198.19.0.0/16",
        healthz_port=20008,
        kubelet_port=20009,
        metrics_server_port=20010,
    )


def test_argv_listens_on_the_node_address_and_verifies_the_kubelets() -> None:
    files = metricsserver.Files(
        kubeconfig=Path("/tb/ms.kubeconfig"),
        tls_cert=Path("/tb/pki/metrics-server.crt"),
        tls_key=Path("/tb/pki/metrics-server.key"),
        kubelet_ca=Path("/tb/pki/ca.crt"),
    )
    argv = metricsserver.argv("/bin/metrics-server", _ms_settings(), files)
    flags = dict(a.removeprefix("--").partition("=")[::2] for a in argv[1:])
    assert argv[0] == "/bin/metrics-server"
    assert flags["bind-address"] == "198.18.7.1"
    assert flags["secure-port"] == "20010"
    assert flags["kubelet-preferred-address-types"] == "InternalIP"
    assert flags["kubelet-certificate-authority"] == "/tb/pki/ca.crt"
    assert "kubelet-insecure-tls" not in flags  # verified, never skipped
    assert "kubelet-use-node-status-port" in flags  # the agent's port is not 10250
    for key in ("kubeconfig", "authentication-kubeconfig", "authorization-kubeconfig"):
        assert flags[key] == "/tb/ms.kubeconfig"
    assert (flags["tls-cert-file"], flags["tls-private-key-file"]) == (str(files.tls_cert), str(files.tls_key))


def _by_name(objects: list[tuple[str, Obj]], kind: str) -> dict[str, tuple[str, Obj]]:
    """The objects of one kind (a ClusterRole and its binding share a name), by name."""
    return {body["metadata"]["name"]: (path, body) for path, body in objects if path.endswith(f"/{kind}")}


@pytest.mark.parametrize(
    ("name", "rules"),
    [
        (
            "system:metrics-server",
            [
                {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]},
            ],
        ),
        (
            "system:aggregated-metrics-reader",
            [{"apiGroups": ["metrics.k8s.io"], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]}],
        ),
    ],
)
def test_cluster_roles_are_upstreams(name: str, rules: list[Obj]) -> None:
    path, body = _by_name(metricsserver.rbac_objects(), "clusterroles")[name]
    assert path == "/apis/rbac.authorization.k8s.io/v1/clusterroles"
    assert body["rules"] == rules


@pytest.mark.parametrize(
    ("name", "path", "role"),
    [
        ("system:metrics-server", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", "system:metrics-server"),
        (
            "metrics-server:system:auth-delegator",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            "system:auth-delegator",
        ),
        (
            "metrics-server-auth-reader",
            "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings",
            "extension-apiserver-authentication-reader",
        ),
    ],
)
def test_bindings_give_the_certificate_user_upstreams_roles(name: str, path: str, role: str) -> None:
    got_path, body = _by_name(metricsserver.rbac_objects(), path.rsplit("/", 1)[1])[name]
    assert got_path == path
    assert body["roleRef"]["name"] == role
    assert body["subjects"] == [
        {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "system:metrics-server"}
    ]


def test_the_aggregated_reader_role_aggregates_into_view_edit_admin() -> None:
    _, body = _by_name(metricsserver.rbac_objects(), "clusterroles")["system:aggregated-metrics-reader"]
    labels = body["metadata"]["labels"]
    assert {k.rsplit("/", 1)[1] for k, v in labels.items() if v == "true"} == {
        "aggregate-to-view",
        "aggregate-to-edit",
        "aggregate-to-admin",
    }


def test_service_resolves_to_the_node_address_through_its_endpointslice() -> None:
    settings = _ms_settings()
    (svc_path, service), (slice_path, endpoint_slice) = metricsserver.service_objects(settings)
    assert svc_path == "/api/v1/namespaces/kube-system/services"
    assert slice_path == "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices"
    assert "selector" not in service["spec"]  # no controller may replace the slice written by the testbed
    (port,) = service["spec"]["ports"]
    assert endpoint_slice["metadata"]["labels"]["kubernetes.io/service-name"] == service["metadata"]["name"]
    assert endpoint_slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] != (
        "endpointslice-controller.k8s.io"
    )
    # The apiserver matches the slice's port by the Service port's name, then dials address:port.
    (slice_port,) = endpoint_slice["ports"]
    assert (slice_port["name"], slice_port["port"]) == (port["name"], settings.metrics_server_port)
    (endpoint,) = endpoint_slice["endpoints"]
    assert endpoint["addresses"] == [settings.node_ip]
    assert not ipaddress.ip_address(settings.node_ip).is_loopback  # an EndpointSlice refuses loopback


def test_api_service_is_verified_with_the_testbed_ca() -> None:
    path, body = metricsserver.api_service(b"-----BEGIN CERTIFICATE-----\nx\n")
    assert path == "/apis/apiregistration.k8s.io/v1/apiservices"
    assert body["metadata"]["name"] == "v1beta1.metrics.k8s.io"
    spec = body["spec"]
    assert (spec["group"], spec["version"]) == ("metrics.k8s.io", "v1beta1")
    assert "insecureSkipTLSVerify" not in spec
    assert base64.b64decode(spec["caBundle"]) == b"-----BEGIN CERTIFICATE-----\nx\n"
    assert spec["service"] == {"name": "metrics-server", "namespace": "kube-system", "port": 443}
    # The aggregator verifies the serving certificate as <service>.<namespace>.svc.
    assert "metrics-server.kube-system.svc" in metricsserver.SERVICE_DNS_NAMES


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({}, False),
        ({"conditions": [{"type": "Available", "status": "False", "reason": "FailedDiscoveryCheck"}]}, False),
        ({"conditions": [{"type": "Available", "status": "True"}]}, True),
    ],
)
def test_available(status: Obj, expected: bool) -> None:
    assert metricsserver.available({"status": status}) is expected


class SteppingClock:
    """Time moves by what is slept: a retry loop runs at once and its deadline still counts."""

    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> datetime.datetime:
        return datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(seconds=self.t)

    async def sleep(self, seconds: float) -> None:
        self.t += seconds


class Apiserver:
    """Answers each POST from a script of status codes (then 201); records the paths."""

    def __init__(self, codes: list[int]) -> None:
        self.codes = codes
        self.posts: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.posts.append(request.url.path)
        code = self.codes.pop(0) if self.codes else 201
        if code == 201:
            return httpx.Response(201, json=json.loads(request.content))
        reason = {404: "NotFound", 409: "AlreadyExists", 403: "Forbidden"}[code]
        return httpx.Response(code, json={"kind": "Status", "status": "Failure", "reason": reason, "code": code})

    def client(self) -> KubeClient:
        return KubeClient(ClusterCredentials(server="https://apiserver.test"), transport=httpx.MockTransport(self))


OBJECTS = [
    ("/api/v1/namespaces/kube-system/services", {"metadata": {"name": "a"}}),
    ("/x/y", {"metadata": {"name": "b"}}),
]


async def test_create_all_waits_out_a_namespace_on_its_way_and_takes_what_exists() -> None:
    server = Apiserver([404, 404, 201, 409])
    async with server.client() as client:
        await metricsserver.create_all(client, OBJECTS, clock=SteppingClock())
    assert server.posts == [OBJECTS[0][0]] * 3 + [OBJECTS[1][0]]


async def test_create_all_gives_up_at_its_deadline() -> None:
    server = Apiserver([404] * 1000)
    clock = SteppingClock()
    async with server.client() as client:
        with pytest.raises(
            metricsserver.MetricsServerError, match="creating /api/v1/namespaces/kube-system/services/a"
        ):
            await metricsserver.create_all(client, OBJECTS, clock=clock, timeout=2.0)
    # Retried every 0.2 s until the deadline, and not past it by more than one step.
    assert 2.0 <= clock.t <= 2.2 + 1e-9
    assert 10 <= len(server.posts) <= 12


async def test_create_all_does_not_retry_a_refusal() -> None:
    server = Apiserver([403])
    async with server.client() as client:
        with pytest.raises(metricsserver.MetricsServerError):
            await metricsserver.create_all(client, OBJECTS, clock=SteppingClock())
    assert len(server.posts) == 1


def test_install_builds_the_pinned_release_from_its_own_go_mod() -> None:
    argv = install.metrics_server_build_argv("/usr/local/go/bin/go")
    # `go install pkg@version`: the module's own go.mod and go.sum decide every dependency, as its release build.
    assert argv[:2] == ["/usr/local/go/bin/go", "install"]
    assert argv[-1] == f"sigs.k8s.io/metrics-server/cmd/metrics-server@{versions.METRICS_SERVER_VERSION}"
    assert versions.METRICS_SERVER_VERSION == "v0.8.0"
    assert "-trimpath" in argv
    ldflags = argv[argv.index("-ldflags") + 1]
    assert "-X k8s.io/client-go/pkg/version.gitVersion=v0.8.0" in ldflags  # what `metrics-server --version` prints
    assert versions.metrics_server_path().name == "metrics-server"
    assert "v0.8.0" in str(versions.metrics_server_path())
