from __future__ import annotations

import copy
from typing import Any

import pytest

from cri.v1 import api_pb2
from nodeagent.kuberuntime import labels as kl
from nodeagent.kuberuntime.errors import CreatePodSandboxConfigError
from nodeagent.kuberuntime.qos import QOSClass
from nodeagent.kuberuntime.runtime_handlers import RuntimeHandler
from nodeagent.kuberuntime.sandbox_config import (
    DNSSettings,
    ResolvConf,
    make_dns_config,
    make_sandbox_config,
    missing_cluster_dns,
    missing_cluster_dns_messages,
    pod_cgroup_parent,
    sandbox_hostname,
)

NODE_USERNS = api_pb2.UserNamespace(mode=api_pb2.NODE)
HOST = ResolvConf(nameservers=("192.168.1.1",), searches=("corp.example",), options=("edns0",))
DNS = DNSSettings(cluster_dns=("10.96.0.10",), cluster_domain="cluster.local", host=HOST)


def pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "ns1", "uid": "u-1", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
    }


@pytest.mark.parametrize(
    ("spec", "dns", "servers", "searches", "options"),
    [
        (
            {},
            DNS,
            ["10.96.0.10"],
            ["ns1.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"],
            ["ndots:5"],
        ),
        ({"dnsPolicy": "Default"}, DNS, ["192.168.1.1"], ["corp.example"], ["edns0"]),
        ({"hostNetwork": True}, DNS, ["192.168.1.1"], ["corp.example"], ["edns0"]),  # ClusterFirst → Default
        (
            {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"},
            DNS,
            ["10.96.0.10"],
            ["ns1.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"],
            ["ndots:5"],
        ),
        ({}, DNSSettings(host=HOST), ["192.168.1.1"], ["corp.example"], ["edns0"]),  # no clusterDNS → Default
        ({"dnsPolicy": "None"}, DNS, [], [], []),
        (
            {
                "dnsPolicy": "None",
                "dnsConfig": {
                    "nameservers": ["1.1.1.1", "1.1.1.1"],
                    "searches": ["a.example"],
                    "options": [{"name": "ndots", "value": "2"}, {"name": "rotate"}],
                },
            },
            DNS,
            ["1.1.1.1"],
            ["a.example"],
            ["ndots:2", "rotate"],
        ),
        (
            {"dnsConfig": {"nameservers": ["10.96.0.10", "8.8.8.8"], "options": [{"name": "ndots", "value": "1"}]}},
            DNS,
            ["10.96.0.10", "8.8.8.8"],
            ["ns1.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"],
            ["ndots:1"],
        ),
    ],
)
def test_dns_config(
    spec: dict[str, Any], dns: DNSSettings, servers: list[str], searches: list[str], options: list[str]
) -> None:
    config = make_dns_config(pod(**spec), dns)
    assert (list(config.servers), list(config.searches), list(config.options)) == (servers, searches, options)


def test_dns_search_list_is_capped() -> None:
    config = make_dns_config(pod(dnsPolicy="None", dnsConfig={"searches": [f"d{i}.example" for i in range(40)]}), DNS)
    assert len(config.searches) == 32


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, "web"),
        ({"hostname": "h1"}, "h1"),
        ({"hostname": "h1", "subdomain": "sub"}, "h1"),
        ({"hostname": "h1", "subdomain": "sub", "setHostnameAsFQDN": True}, "h1.sub.ns1.svc.cluster.local"),
        ({"hostNetwork": True, "hostname": "h1"}, ""),  # the node's UTS namespace: no hostname to set
        ({"hostname": "a" * 62 + "-b"}, "a" * 62),  # cut to 63, trailing dash dropped
    ],
)
def test_hostname(spec: dict[str, Any], expected: str) -> None:
    assert sandbox_hostname(pod(**spec), cluster_domain="cluster.local") == expected


def test_fqdn_too_long() -> None:
    with pytest.raises(CreatePodSandboxConfigError, match="too long"):
        sandbox_hostname(
            pod(hostname="h" * 60, subdomain="sub", setHostnameAsFQDN=True),
            cluster_domain="cluster.local",
        )


@pytest.mark.parametrize(
    ("qos", "root", "expected"),
    [
        (QOSClass.GUARANTEED, "/", "/kubepods/podu-1"),
        (QOSClass.BURSTABLE, "/", "/kubepods/burstable/podu-1"),
        (QOSClass.BEST_EFFORT, "/", "/kubepods/besteffort/podu-1"),
        (QOSClass.BURSTABLE, "/custom/", "/custom/kubepods/burstable/podu-1"),
    ],
)
def test_pod_cgroup_parent(qos: QOSClass, root: str, expected: str) -> None:
    assert pod_cgroup_parent("u-1", qos, root) == expected


def test_make_sandbox_config_defaults() -> None:
    config = make_sandbox_config(pod(), attempt=2, cgroup_parent="/kubepods/besteffort/podu-1", dns=DNS)
    assert config.metadata == api_pb2.PodSandboxMetadata(name="web", uid="u-1", namespace="ns1", attempt=2)
    assert config.hostname == "web"
    assert config.log_directory == "/var/log/pods/ns1_web_u-1"
    assert dict(config.labels) == kl.sandbox_labels(pod())
    assert config.linux.cgroup_parent == "/kubepods/besteffort/podu-1"
    sc = config.linux.security_context
    assert sc.namespace_options == api_pb2.NamespaceOption(
        network=api_pb2.POD, pid=api_pb2.CONTAINER, ipc=api_pb2.POD, userns_options=NODE_USERNS
    )
    # As upstream: the sandbox's own seccomp is always RuntimeDefault (the pod's profile is its containers').
    assert sc.HasField("seccomp")
    assert sc.seccomp.profile_type == api_pb2.SecurityProfile.RuntimeDefault
    assert not sc.HasField("run_as_user")
    assert not sc.HasField("selinux_options")
    assert sc.supplemental_groups_policy == api_pb2.Merge
    assert not sc.privileged
    # As upstream's convertOverheadToLinuxResources: sent, empty, without an overhead.
    assert config.linux.HasField("overhead")
    assert config.linux.overhead == api_pb2.LinuxContainerResources()
    assert list(config.port_mappings) == []


def test_make_sandbox_config_full() -> None:
    spec: dict[str, Any] = {
        "hostNetwork": True,
        "hostPID": True,
        "hostIPC": True,
        "securityContext": {
            "runAsUser": 1000,
            "runAsGroup": 2000,
            "fsGroup": 3000,
            "supplementalGroups": [4000, 5000],
            "sysctls": [{"name": "net.core.somaxconn", "value": "1024"}],
            "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"},
            "supplementalGroupsPolicy": "Strict",
            "seLinuxOptions": {"user": "u", "role": "r", "type": "t", "level": "s0:c1,c2"},
        },
        "overhead": {"cpu": "250m", "memory": "120Mi"},
        "containers": [
            {
                "name": "c",
                "securityContext": {"privileged": True},
                "ports": [
                    {"containerPort": 80, "hostPort": 8080},
                    {"containerPort": 53, "protocol": "UDP", "hostIP": "127.0.0.1", "hostPort": 53},
                    {"containerPort": 9090},
                    {"containerPort": 80, "hostPort": 8080},
                ],
            }
        ],
    }
    config = make_sandbox_config(pod(**spec), attempt=0, cgroup_parent="/x", dns=DNS, pod_log_dir_root="/logs")
    assert config.hostname == ""
    assert config.log_directory == "/logs/ns1_web_u-1"
    sc = config.linux.security_context
    assert sc.namespace_options == api_pb2.NamespaceOption(
        network=api_pb2.NODE, pid=api_pb2.NODE, ipc=api_pb2.NODE, userns_options=NODE_USERNS
    )
    assert (sc.run_as_user.value, sc.run_as_group.value) == (1000, 2000)
    assert list(sc.supplemental_groups) == [3000, 4000, 5000]
    assert sc.supplemental_groups_policy == api_pb2.Strict
    assert sc.selinux_options == api_pb2.SELinuxOption(user="u", role="r", type="t", level="s0:c1,c2")
    assert sc.privileged
    assert sc.seccomp == api_pb2.SecurityProfile(profile_type=api_pb2.SecurityProfile.RuntimeDefault)
    assert dict(config.linux.sysctls) == {"net.core.somaxconn": "1024"}
    assert list(config.port_mappings) == [
        api_pb2.PortMapping(protocol=api_pb2.TCP, container_port=80, host_port=8080),
        api_pb2.PortMapping(protocol=api_pb2.UDP, container_port=53, host_port=53, host_ip="127.0.0.1"),
        api_pb2.PortMapping(protocol=api_pb2.TCP, container_port=9090),
    ]
    overhead = config.linux.overhead
    assert (overhead.cpu_shares, overhead.cpu_quota, overhead.cpu_period) == (256, 25000, 100000)
    assert overhead.memory_limit_in_bytes == 120 * 1024 * 1024


def test_share_process_namespace() -> None:
    config = make_sandbox_config(pod(shareProcessNamespace=True), attempt=0, cgroup_parent="/x", dns=DNS)
    assert config.linux.security_context.namespace_options.pid == api_pb2.POD


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda p: p["metadata"].pop("uid"), "metadata.uid"),
        (lambda p: p["spec"].update(dnsPolicy="Bogus"), "dnsPolicy"),
        (lambda p: p["spec"]["containers"][0].update(ports=[{"containerPort": 1, "protocol": "ICMP"}]), "protocol"),
        (lambda p: p["spec"].update(securityContext={"supplementalGroupsPolicy": "Loose"}), "supplementalGroupsPolicy"),
    ],
)
def test_sandbox_config_errors(mutate: Any, match: str) -> None:
    p = copy.deepcopy(pod())
    mutate(p)
    with pytest.raises(CreatePodSandboxConfigError, match=match):
        make_sandbox_config(p, attempt=0, cgroup_parent="/x", dns=DNS)


@pytest.mark.parametrize(
    ("spec", "cluster_dns", "missing"),
    [
        ({}, (), True),  # ClusterFirst by default
        ({"dnsPolicy": "ClusterFirst"}, ("198.18.0.10",), False),
        ({"dnsPolicy": "ClusterFirst", "hostNetwork": True}, (), False),  # falls back to Default quietly
        ({"dnsPolicy": "ClusterFirstWithHostNet", "hostNetwork": True}, (), True),
        ({"dnsPolicy": "ClusterFirstWithHostNet"}, (), True),
        ({"dnsPolicy": "Default"}, (), False),
        ({"dnsPolicy": "None"}, (), False),
    ],
)
def test_missing_cluster_dns(spec: dict[str, Any], cluster_dns: tuple[str, ...], missing: bool) -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"}, "spec": spec}
    assert missing_cluster_dns(pod, DNSSettings(cluster_dns=cluster_dns)) is missing


def test_missing_cluster_dns_messages_are_upstreams() -> None:
    node, for_pod = missing_cluster_dns_messages({"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"}})
    assert node == (
        'kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. '
        'Falling back to "Default" policy.'
    )
    assert for_pod == f'pod: "p_ns(u-1)". {node}'


def test_privileged_ephemeral_container_makes_the_sandbox_privileged() -> None:
    # Upstream's HasPrivilegedContainer visits ephemeral containers too.
    spec = {"ephemeralContainers": [{"name": "debug", "securityContext": {"privileged": True}}]}
    config = make_sandbox_config(pod(**spec), attempt=0, cgroup_parent="/x", dns=DNS)
    assert config.linux.security_context.privileged


@pytest.mark.parametrize(
    ("overhead", "expected"),
    [
        # As upstream's calculateLinuxResources(cpu, cpu, memory): an unset cpu is zero (the minimum shares, no
        # quota), the period is always set.
        (
            {"memory": "64Mi"},
            api_pb2.LinuxContainerResources(cpu_shares=2, cpu_period=100000, memory_limit_in_bytes=64 << 20),
        ),
        ({"cpu": "10m"}, api_pb2.LinuxContainerResources(cpu_shares=10, cpu_period=100000, cpu_quota=1000)),
        ({}, api_pb2.LinuxContainerResources(cpu_shares=2, cpu_period=100000)),
    ],
)
def test_overhead_as_runtime_resources(overhead: dict[str, str], expected: api_pb2.LinuxContainerResources) -> None:
    config = make_sandbox_config(pod(overhead=overhead), attempt=0, cgroup_parent="/x", dns=DNS)
    assert config.linux.overhead == expected


HANDLERS_WITHOUT_USERNS = (RuntimeHandler(name=""), RuntimeHandler(name="test-handler"))


@pytest.mark.parametrize(
    ("handler", "handlers", "message"),
    [
        # containerd 1.7 lists no handlers at all: upstream reads that as no support.
        ("", (), "can't set `spec.hostUsers: false`, runtime does not support user namespaces"),
        (
            "test-handler",
            HANDLERS_WITHOUT_USERNS,
            'can\'t set `spec.hostUsers: false`, RuntimeClass handler "test-handler" does not support user namespaces',
        ),
        (
            "nosuch",
            HANDLERS_WITHOUT_USERNS,
            'can\'t set `spec.hostUsers: false`, RuntimeClass handler "nosuch" does not support user namespaces: '
            'the handler "nosuch" is not known',
        ),
        # A handler that supports them: upstream would map a 65536-ID range; nodeagent does not, and says so.
        (
            "",
            (RuntimeHandler(name="", supports_user_namespaces=True),),
            "can't set `spec.hostUsers: false`, nodeagent does not allocate user namespace mappings",
        ),
    ],
)
def test_host_users_false_is_refused(handler: str, handlers: tuple[RuntimeHandler, ...], message: str) -> None:
    with pytest.raises(CreatePodSandboxConfigError) as caught:
        make_sandbox_config(
            pod(hostUsers=False),
            attempt=0,
            cgroup_parent="/x",
            dns=DNS,
            runtime_handler=handler,
            runtime_handlers=handlers,
        )
    assert str(caught.value) == message


@pytest.mark.parametrize("host_users", [None, True])
def test_host_users_unset_or_true_is_the_nodes_user_namespace(host_users: bool | None) -> None:
    spec = {} if host_users is None else {"hostUsers": host_users}
    config = make_sandbox_config(pod(**spec), attempt=0, cgroup_parent="/x", dns=DNS)
    assert config.linux.security_context.namespace_options.userns_options == NODE_USERNS


def _resources(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # No requests or limits: the minimum shares, no quota (upstream sends these too; containerd makes the pause
        # container's io.kubernetes.cri.sandbox-* annotations of them).
        ({}, api_pb2.LinuxContainerResources(cpu_shares=2, cpu_period=100000)),
        (
            {
                "containers": [
                    {"name": "a", "resources": _resources({"cpu": "100m"}, {"cpu": "200m", "memory": "64Mi"})},
                    {"name": "b", "resources": _resources({"cpu": "150m"}, {"cpu": "300m", "memory": "64Mi"})},
                ],
                "overhead": {"cpu": "1", "memory": "1Gi"},  # excluded, as upstream's ExcludeOverhead
            },
            api_pb2.LinuxContainerResources(
                cpu_shares=256, cpu_period=100000, cpu_quota=50000, memory_limit_in_bytes=128 << 20
            ),
        ),
        # Limits only: the shares follow the limit (a cpu request is absent).
        (
            {"containers": [{"name": "a", "resources": _resources(limits={"cpu": "500m"})}]},
            api_pb2.LinuxContainerResources(cpu_shares=512, cpu_period=100000, cpu_quota=50000),
        ),
        # An init container bigger than the app containers sets the peak; a sidecar adds to everything after it.
        (
            {
                "initContainers": [
                    {"name": "s", "restartPolicy": "Always", "resources": _resources({"cpu": "100m"}, {"cpu": "100m"})},
                    {"name": "i", "resources": _resources({"cpu": "1"}, {"cpu": "1"})},
                ],
                "containers": [{"name": "a", "resources": _resources({"cpu": "200m"}, {"cpu": "200m"})}],
            },
            api_pb2.LinuxContainerResources(cpu_shares=1126, cpu_period=100000, cpu_quota=110000),
        ),
    ],
)
def test_sandbox_resources_are_the_pods_requests_and_limits(
    spec: dict[str, Any], expected: api_pb2.LinuxContainerResources
) -> None:
    config = make_sandbox_config(pod(**spec), attempt=0, cgroup_parent="/x", dns=DNS)
    assert config.linux.resources == expected
