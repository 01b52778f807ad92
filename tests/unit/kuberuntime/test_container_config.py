from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from cri.v1 import api_pb2
from nodeagent.kuberuntime import labels as kl
from nodeagent.kuberuntime.container_config import (
    DEFAULT_MASKED_PATHS,
    DEFAULT_READONLY_PATHS,
    apparmor_profile,
    default_masked_paths,
    image_user_of,
    make_container_config,
    make_environment,
    make_linux_resources,
    make_security_context,
    oom_score_adj,
    parse_image_user,
)
from nodeagent.kuberuntime.errors import CreateContainerConfigError
from nodeagent.kuberuntime.hashing import hash_container
from nodeagent.kuberuntime.qos import QOSClass
from nodeagent.kuberuntime.swap import SwapSupport

GI = 1024**3
CONFIG_MAPS: dict[tuple[str, str], dict[str, str]] = {("default", "cm"): {"K": "cm-v", "OTHER": "o"}}
SECRETS: dict[tuple[str, str], dict[str, str]] = {("default", "s"): {"PASS": "hunter2"}}


def get_cm(namespace: str, name: str) -> Mapping[str, str] | None:
    return CONFIG_MAPS.get((namespace, name))


def get_secret(namespace: str, name: str) -> Mapping[str, str] | None:
    return SECRETS.get((namespace, name))


def make_pod(container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "web",
            "namespace": "default",
            "uid": "u-1",
            "labels": {"app": "web"},
            "annotations": {"a/b": "ann"},
        },
        "spec": {"nodeName": "node-a", "serviceAccountName": "sa", "containers": [container], **spec},
    }


def env_of(container: dict[str, Any], service_env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    return make_environment(
        make_pod(container),
        container,
        service_env=service_env or {},
        node_name="node-a",
        host_ip="10.0.0.1",
        pod_ips=["10.244.0.5", "fd00::5"],
        node_allocatable={"cpu": "4", "memory": "8Gi", "ephemeral-storage": "100Gi"},
        get_config_map=get_cm,
        get_secret=get_secret,
    )


def field(path: str) -> dict[str, Any]:
    return {"name": "V", "valueFrom": {"fieldRef": {"fieldPath": path}}}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("metadata.name", "web"),
        ("metadata.namespace", "default"),
        ("metadata.uid", "u-1"),
        ("metadata.labels['app']", "web"),
        ("metadata.labels['missing']", ""),
        ("metadata.annotations['a/b']", "ann"),
        ("spec.nodeName", "node-a"),
        ("spec.serviceAccountName", "sa"),
        ("status.hostIP", "10.0.0.1"),
        ("status.hostIPs", "10.0.0.1"),
        ("status.podIP", "10.244.0.5"),
        ("status.podIPs", "10.244.0.5,fd00::5"),
    ],
)
def test_field_ref(path: str, value: str) -> None:
    assert env_of({"name": "c", "env": [field(path)]}) == [("V", value)]


def resource_env(resource: str, divisor: str | None = None, resources: dict[str, Any] | None = None) -> str:
    ref: dict[str, Any] = {"resource": resource}
    if divisor is not None:
        ref["divisor"] = divisor
    container = {
        "name": "c",
        "resources": resources or {},
        "env": [{"name": "V", "valueFrom": {"resourceFieldRef": ref}}],
    }
    return env_of(container)[0][1]


LIMITED = {"limits": {"cpu": "1500m", "memory": "1Gi"}, "requests": {"cpu": "250m", "memory": "512Mi"}}


@pytest.mark.parametrize(
    ("resource", "divisor", "resources", "value"),
    [
        ("limits.cpu", None, LIMITED, "2"),  # 1.5 cores rounds up
        ("limits.cpu", "1m", LIMITED, "1500"),
        ("requests.cpu", None, LIMITED, "1"),
        ("requests.cpu", "1m", LIMITED, "250"),
        ("limits.memory", None, LIMITED, str(GI)),
        ("limits.memory", "1Mi", LIMITED, "1024"),
        ("requests.memory", "1Gi", LIMITED, "1"),  # 0.5 Gi rounds up
        ("limits.cpu", None, {}, "4"),  # node allocatable
        ("limits.memory", "1Gi", {}, "8"),
        ("limits.ephemeral-storage", "1Gi", {}, "100"),
        ("requests.cpu", None, {}, "0"),
        ("requests.memory", None, {"limits": {"memory": "1Ki"}}, "1024"),  # request defaults to limit
        # The apiserver sends an unset divisor as the zero quantity: it means 1, as upstream.
        ("limits.cpu", "0", LIMITED, "2"),
        ("limits.cpu", "0", {}, "4"),
        ("limits.memory", "0", {}, str(8 * GI)),
        ("requests.memory", "0", LIMITED, str(GI // 2)),
        ("limits.ephemeral-storage", "0", {}, str(100 * GI)),
        ("limits.cpu", "0m", LIMITED, "2"),
        ("limits.memory", "", LIMITED, str(GI)),
    ],
)
def test_resource_field_ref(resource: str, divisor: str | None, resources: dict[str, Any], value: str) -> None:
    assert resource_env(resource, divisor, resources) == value


def test_env_order_expansion_and_sources() -> None:
    container = {
        "name": "c",
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}, {"secretRef": {"name": "s"}}],
        "env": [
            {"name": "A", "value": "a"},
            {"name": "B", "value": "$(A)-$(SVC_HOST)-$(NOPE)-$$(A)"},
            {"name": "CM_K", "value": "override"},
            {"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "K"}}},
            {"name": "P", "valueFrom": {"secretKeyRef": {"name": "s", "key": "PASS"}}},
            {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "K", "optional": True}}},
            {"name": "OPT2", "valueFrom": {"secretKeyRef": {"name": "s", "key": "NOPE", "optional": True}}},
            {"name": "SVC_HOST", "value": "mine"},
        ],
    }
    assert env_of(container, {"SVC_HOST": "10.0.0.9", "SVC_PORT": "80"}) == [
        ("CM_K", "override"),
        ("CM_OTHER", "o"),
        ("PASS", "hunter2"),
        ("A", "a"),
        ("B", "a-10.0.0.9-$(NOPE)-$(A)"),
        ("K", "cm-v"),
        ("P", "hunter2"),
        ("SVC_HOST", "mine"),
        ("SVC_PORT", "80"),
    ]


def test_optional_env_from_missing_is_skipped() -> None:
    container = {"name": "c", "envFrom": [{"configMapRef": {"name": "gone", "optional": True}}]}
    assert env_of(container) == []


@pytest.mark.parametrize(
    ("env", "env_from", "message"),
    [
        (
            [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "FOO"}}}],
            [],
            "couldn't find key FOO in ConfigMap default/cm",
        ),
        (
            [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "FOO"}}}],
            [],
            "couldn't find key FOO in Secret default/s",
        ),
        ([{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "K"}}}], [], 'configmap "gone"'),
        ([], [{"secretRef": {"name": "gone"}}], 'secret "gone" not found'),
        ([field("spec.bogus")], [], "unsupported fieldPath: spec.bogus"),
        ([{"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "limits.gpu"}}}], [], "unsupported"),
        ([{"name": "X", "valueFrom": {}}], [], "unsupported valueFrom"),
    ],
)
def test_env_errors(env: list[dict[str, Any]], env_from: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(CreateContainerConfigError, match=message) as info:
        env_of({"name": "c", "env": env, "envFrom": env_from})
    assert info.value.reason == "CreateContainerConfigError"


@pytest.mark.parametrize(
    ("resources", "qos", "shares", "quota", "memory"),
    [
        ({}, QOSClass.BEST_EFFORT, 2, 0, 0),
        ({"requests": {"cpu": "1m"}}, QOSClass.BURSTABLE, 2, 0, 0),
        ({"requests": {"cpu": "250m"}}, QOSClass.BURSTABLE, 256, 0, 0),
        ({"limits": {"cpu": "500m", "memory": "256Mi"}}, QOSClass.GUARANTEED, 512, 50000, 256 * 1024**2),
        ({"requests": {"cpu": "100m"}, "limits": {"cpu": "2"}}, QOSClass.BURSTABLE, 102, 200000, 0),
        ({"limits": {"cpu": "5m"}}, QOSClass.BURSTABLE, 5, 1000, 0),  # quota at least 1000
        ({"requests": {"cpu": "1000"}}, QOSClass.BURSTABLE, 262144, 0, 0),  # shares capped
    ],
)
def test_linux_resources(resources: dict[str, Any], qos: QOSClass, shares: int, quota: int, memory: int) -> None:
    out = make_linux_resources({"name": "c", "resources": resources}, qos=qos, memory_capacity=8 * GI)
    assert (out.cpu_shares, out.cpu_quota, out.cpu_period, out.memory_limit_in_bytes) == (
        shares,
        quota,
        100000,
        memory,
    )


V1_SWAP = SwapSupport(cgroup_v2=False, controller=True)


@pytest.mark.parametrize(
    ("resources", "hugepages", "swap"),
    [
        # As the kubelet on this host: a zero limit at each page size, the swap limit equal to the memory limit.
        ({}, [("2MB", 0), ("1GB", 0)], 0),
        ({"limits": {"memory": "64Mi"}}, [("2MB", 0), ("1GB", 0)], 64 << 20),
        ({"limits": {"memory": "1Gi", "hugepages-2Mi": "8Mi"}}, [("2MB", 8 << 20), ("1GB", 0)], GI),
    ],
)
def test_linux_resources_hugepages_and_swap(
    resources: dict[str, Any], hugepages: list[tuple[str, int]], swap: int
) -> None:
    out = make_linux_resources(
        {"name": "c", "resources": resources},
        qos=QOSClass.BURSTABLE,
        memory_capacity=8 * GI,
        hugepage_sizes=("2MB", "1GB"),
        swap=V1_SWAP,
    )
    assert [(h.page_size, h.limit) for h in out.hugepage_limits] == hugepages
    assert out.memory_swap_limit_in_bytes == swap
    assert dict(out.unified) == {}


def test_linux_resources_on_cgroup_v2_without_hugepages() -> None:
    out = make_linux_resources(
        {"name": "c", "resources": {"limits": {"memory": "64Mi"}}},
        qos=QOSClass.BURSTABLE,
        memory_capacity=8 * GI,
        hugepage_sizes=(),
        swap=SwapSupport(cgroup_v2=True, controller=True),
    )
    assert (list(out.hugepage_limits), out.memory_swap_limit_in_bytes) == ([], 0)
    assert dict(out.unified) == {"memory.swap.max": "0"}


@pytest.mark.parametrize(
    ("security_context", "capabilities"),
    [
        # As upstream's convertToRuntimeCapabilities: no message unless the container names `capabilities`
        # (nodeagent sent an empty one for every container).
        (None, None),
        ({}, None),
        ({"runAsUser": 5, "capabilities": None}, None),
        ({"capabilities": {}}, ([], [])),
        ({"capabilities": {"add": ["NET_ADMIN"]}}, (["NET_ADMIN"], [])),
        ({"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}, (["NET_BIND_SERVICE"], ["ALL"])),
    ],
)
def test_capabilities_message_only_when_named(
    security_context: dict[str, Any] | None, capabilities: tuple[list[str], list[str]] | None
) -> None:
    container: dict[str, Any] = {"name": "c"}
    if security_context is not None:
        container["securityContext"] = security_context
    sc = make_security_context(make_pod(container), container)
    if capabilities is None:
        assert not sc.HasField("capabilities")
        return
    assert sc.HasField("capabilities")
    assert (list(sc.capabilities.add_capabilities), list(sc.capabilities.drop_capabilities)) == capabilities


@pytest.mark.parametrize(
    ("qos", "memory_request", "expected"),
    [
        (QOSClass.GUARANTEED, "1Gi", -997),
        (QOSClass.BEST_EFFORT, None, 1000),
        (QOSClass.BURSTABLE, "4Gi", 500),
        (QOSClass.BURSTABLE, "8Gi", 3),
        (QOSClass.BURSTABLE, "16Gi", 3),
        (QOSClass.BURSTABLE, None, 999),
        (QOSClass.BURSTABLE, "1", 999),
    ],
)
def test_oom_score_adj(qos: QOSClass, memory_request: str | None, expected: int) -> None:
    resources = {"requests": {"memory": memory_request}} if memory_request else {}
    assert oom_score_adj(qos, {"name": "c", "resources": resources}, 8 * GI) == expected


def _mem(request: str | None = None) -> dict[str, Any]:
    return {"requests": {"memory": request}} if request else {}


def _oom_pod(
    containers: list[dict[str, Any]],
    init: list[dict[str, Any]] | None = None,
    *,
    priority: int | None = None,
    priority_class: str = "",
    source: str = "api",
    pod_memory: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers, "initContainers": init or []}
    if priority is not None:
        spec["priority"] = priority
    if priority_class:
        spec["priorityClassName"] = priority_class
    if pod_memory:
        spec["resources"] = {"requests": {"memory": pod_memory}}
    return {"metadata": {"annotations": {"kubernetes.io/config.source": source}}, "spec": spec}


_APP = {"name": "app", "resources": _mem("2Gi")}
_SIDECAR = {"name": "side", "restartPolicy": "Always", "resources": _mem("1Gi")}


@pytest.mark.parametrize(
    ("pod", "container", "qos", "expected"),
    [
        # Upstream IsNodeCriticalPod: critical (priority >= 2e9, or static/mirror) and of system-node-critical.
        (_oom_pod([{"name": "app"}], priority=2000001000, priority_class="system-node-critical"), 0, "be", -997),
        (_oom_pod([_APP], priority=2000001000, priority_class="system-node-critical"), 0, "bu", -997),
        (_oom_pod([{"name": "app"}], priority_class="system-node-critical", source="file"), 0, "be", -997),
        # Critical but not node-critical, or the class name without the priority: the QoS decides.
        (_oom_pod([{"name": "app"}], priority=2000000000, priority_class="system-cluster-critical"), 0, "be", 1000),
        (_oom_pod([{"name": "app"}], priority=1000, priority_class="system-node-critical"), 0, "be", 1000),
        (_oom_pod([_APP], priority=2000000000, priority_class="system-cluster-critical"), 0, "bu", 750),
        # Pod-level memory request (PodLevelResources): the unclaimed 3Gi is the one container's share.
        (_oom_pod([{"name": "app", "resources": _mem("1Gi")}], pod_memory="4Gi"), 0, "bu", 500),
        # ... shared by the regular and init containers: (4Gi - 2Gi - 1Gi) / 2 = 512Mi each.
        (_oom_pod([_APP], [_SIDECAR], pod_memory="4Gi"), 0, "bu", 688),
        # A sidecar scores no higher than the regular container with the smallest request (2Gi: 750, not 875).
        (_oom_pod([_APP], [_SIDECAR]), "side", "bu", 750),
        (_oom_pod([_APP], [_SIDECAR]), 0, "bu", 750),
        (_oom_pod([_APP], [{**_SIDECAR, "resources": _mem("4Gi")}]), "side", "bu", 500),
        (_oom_pod([_APP, {"name": "small"}], [_SIDECAR]), "side", "bu", 875),
        # A plain init container is no sidecar.
        (_oom_pod([_APP], [{"name": "side", "resources": _mem("1Gi")}]), "side", "bu", 875),
    ],
)
def test_oom_score_adj_of_the_pod(pod: dict[str, Any], container: int | str, qos: str, expected: int) -> None:
    spec = pod["spec"]
    found = (
        spec["containers"][container]
        if isinstance(container, int)
        else next(c for c in spec["initContainers"] if c["name"] == container)
    )
    klass = QOSClass.BEST_EFFORT if qos == "be" else QOSClass.BURSTABLE
    assert oom_score_adj(klass, found, 8 * GI, pod) == expected


def test_node_critical_pod_config_carries_upstreams_oom_score_adj() -> None:
    # The CRI config carries upstream's value; containerd's restrict_oom_score_adj clamps it on these machines.
    container = {"name": "app", "image": "busybox"}
    pod = make_pod(container, priority=2000001000, priorityClassName="system-node-critical")
    config = make_container_config(
        pod,
        container,
        restart_count=0,
        pod_ips=[],
        node_name="node-a",
        host_ip="10.0.0.1",
        service_env={},
        image_ref="sha256:abc",
        memory_capacity=8 * GI,
        node_allocatable={},
    )
    assert config.linux.resources.oom_score_adj == -997


def test_security_context() -> None:
    container = {
        "name": "c",
        "securityContext": {
            "runAsUser": 1001,
            "privileged": True,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"add": ["net_admin", "CAP_SYS_TIME"], "drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    pod = make_pod(
        container,
        hostNetwork=True,
        securityContext={"runAsUser": 5, "runAsGroup": 7, "supplementalGroups": [9], "fsGroup": 8},
    )
    sc = make_security_context(pod, container)
    assert (sc.run_as_user.value, sc.run_as_group.value) == (1001, 7)
    assert sc.privileged and sc.readonly_rootfs and sc.no_new_privs
    # As upstream: passed as written; the runtime prefixes CAP_ (a "CAP_..." name is the user's mistake there too).
    assert list(sc.capabilities.add_capabilities) == ["net_admin", "CAP_SYS_TIME"]
    assert list(sc.capabilities.drop_capabilities) == ["ALL"]
    assert list(sc.supplemental_groups) == [8, 9]
    assert sc.namespace_options.network == api_pb2.NODE
    assert sc.seccomp.profile_type == api_pb2.SecurityProfile.RuntimeDefault


@pytest.mark.parametrize(
    ("spec_sc", "image_user", "uid", "username", "error"),
    [
        # An image without a user is root, and upstream sends it as uid 0 (getImageUser); nodeagent sent none.
        ({}, "", 0, "", None),
        ({"allowPrivilegeEscalation": True}, "", 0, "", None),
        ({}, ":1000", 0, "", None),  # containerd reports neither a uid nor a name for an empty user part
        ({"runAsUser": 7}, "", 7, "", None),
        ({}, "1000:1000", 1000, "", None),
        ({}, "nginx", None, "nginx", None),
        ({"runAsUser": 0}, "nginx", 0, "", None),
        ({"runAsNonRoot": True}, "1000", 1000, "", None),
        ({"runAsNonRoot": True}, "0", None, "", "image will run as root"),
        ({"runAsNonRoot": True}, "", None, "", "image will run as root"),
        ({"runAsNonRoot": True}, "nginx", None, "", "non-numeric user \\(nginx\\)"),
        ({"runAsNonRoot": True}, "nginx:nginx", None, "", "non-numeric user \\(nginx\\)"),
        # uid:gid, as the grpc health image's "65535:65535": the uid decides, the group is dropped.
        ({"runAsNonRoot": True}, "65535:65535", 65535, "", None),
        ({"runAsNonRoot": True}, "0:0", None, "", "image will run as root"),
        ({"runAsNonRoot": True}, "4294967296", None, "", "invalid user id \\(4294967296\\)"),
        ({"runAsNonRoot": True, "runAsUser": 0}, "", None, "", "container's runAsUser breaks non-root policy"),
        ({"runAsNonRoot": True, "runAsUser": 0}, "1000", None, "", "container's runAsUser breaks non-root policy"),
        ({"runAsNonRoot": True, "runAsUser": 1000}, "0", 1000, "", None),  # the spec's user wins over the image's
        ({"runAsNonRoot": True, "runAsUser": 1000}, "nginx", 1000, "", None),
    ],
)
def test_image_user_and_run_as_non_root(
    spec_sc: dict[str, Any], image_user: str, uid: int | None, username: str, error: str | None
) -> None:
    container = {"name": "c", "securityContext": spec_sc}
    pod = make_pod(container)
    if error is not None:
        with pytest.raises(CreateContainerConfigError, match=error):
            make_security_context(pod, container, image_user=image_user)
        return
    sc = make_security_context(pod, container, image_user=image_user)
    assert (sc.run_as_user.value if sc.HasField("run_as_user") else None) == uid
    assert sc.run_as_username == username
    assert not sc.no_new_privs


def test_make_container_config() -> None:
    container: dict[str, Any] = {
        "name": "app",
        "image": "busybox",
        "command": ["sh", "-c", "echo $(GREETING) $$(GREETING) $(SVC_HOST)"],
        "args": ["$(GREETING)"],
        "workingDir": "/w",
        "env": [{"name": "GREETING", "value": "hi"}],
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
        "stdin": True,
        "tty": True,
    }
    pod = make_pod(container)
    config = make_container_config(
        pod,
        container,
        restart_count=2,
        pod_ips=["10.244.0.5"],
        node_name="node-a",
        host_ip="10.0.0.1",
        service_env={"SVC_HOST": "10.0.0.9"},
        image_ref="sha256:abc",
        memory_capacity=8 * GI,
        node_allocatable={},
    )
    assert config.metadata == api_pb2.ContainerMetadata(name="app", attempt=2)
    assert config.image == api_pb2.ImageSpec(image="sha256:abc", user_specified_image="busybox")
    assert list(config.command) == ["sh", "-c", "echo hi $(GREETING) 10.0.0.9"]
    assert list(config.args) == ["hi"]
    assert config.working_dir == "/w"
    assert [(e.key, e.value) for e in config.envs] == [("GREETING", "hi"), ("SVC_HOST", "10.0.0.9")]
    assert config.log_path == "app/2.log"
    assert config.stdin and config.tty and not config.stdin_once
    assert dict(config.labels) == kl.container_labels(pod, container)
    assert config.annotations[kl.CONTAINER_HASH_ANNOTATION] == hash_container(container)
    assert config.annotations[kl.CONTAINER_RESTART_COUNT_ANNOTATION] == "2"
    assert config.linux.resources.oom_score_adj == -997
    assert config.linux.resources.cpu_quota == 100000


def test_make_container_config_bad_quantity() -> None:
    container = {"name": "app", "image": "busybox", "resources": {"limits": {"cpu": "lots"}}}
    with pytest.raises(CreateContainerConfigError, match="invalid"):
        make_container_config(
            copy.deepcopy(make_pod(container)),
            container,
            restart_count=0,
            pod_ips=[],
            node_name="n",
            host_ip="",
            service_env={},
            image_ref="x",
            memory_capacity=GI,
            node_allocatable={},
        )


@pytest.mark.parametrize(
    ("image", "user"),
    [
        (None, ""),
        (api_pb2.Image(id="sha256:1"), ""),  # neither: root
        (api_pb2.Image(id="sha256:1", uid=api_pb2.Int64Value(value=65535)), "65535"),
        (api_pb2.Image(id="sha256:1", uid=api_pb2.Int64Value(value=0)), "0"),
        (api_pb2.Image(id="sha256:1", username="nginx"), "nginx"),
    ],
)
def test_image_user_of_the_cri_image_status(image: api_pb2.Image | None, user: str) -> None:
    assert image_user_of(image) == user


@pytest.mark.parametrize(
    ("user", "parsed"),
    [
        ("", (None, "")),
        ("1000", (1000, "")),
        ("1000:1000", (1000, "")),
        ("app", (None, "app")),
        ("app:staff", (None, "app")),
        (":1000", (None, "")),
    ],
)
def test_parse_image_user(user: str, parsed: tuple[int | None, str]) -> None:
    assert parse_image_user(user) == parsed


# --- the securityContext fields beyond users and capabilities (issue 29) ---------------------------------------------


def test_seccomp_container_over_pod_and_localhost_under_the_root_dir() -> None:
    container = {
        "name": "c",
        "securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "a.json"}},
    }
    pod = make_pod(container, securityContext={"seccompProfile": {"type": "RuntimeDefault"}})
    sc = make_security_context(pod, container, seccomp_profile_root="/var/lib/agent/seccomp")
    assert sc.seccomp == api_pb2.SecurityProfile(
        profile_type=api_pb2.SecurityProfile.Localhost, localhost_ref="/var/lib/agent/seccomp/a.json"
    )
    # The pod's profile when the container has none; Unconfined when neither has (SeccompDefault off).
    other = {"name": "d"}
    assert make_security_context(pod, other).seccomp.profile_type == api_pb2.SecurityProfile.RuntimeDefault
    assert make_security_context(make_pod(other), other).seccomp.profile_type == api_pb2.SecurityProfile.Unconfined
    bad = {"name": "e", "securityContext": {"seccompProfile": {"type": "Localhost"}}}
    with pytest.raises(CreateContainerConfigError, match="localhostProfile must be set"):
        make_security_context(make_pod(bad), bad)


def test_selinux_options_container_over_pod() -> None:
    pod_level = {"user": "system_u", "role": "system_r", "type": "pod_t", "level": "s0:c1"}
    container = {"name": "c", "securityContext": {"seLinuxOptions": {"type": "ctr_t", "level": "s0:c2"}}}
    pod = make_pod(container, securityContext={"seLinuxOptions": pod_level})
    # As upstream DetermineEffectiveSecurityContext: the container's options replace the pod's whole.
    assert make_security_context(pod, container).selinux_options == api_pb2.SELinuxOption(type="ctr_t", level="s0:c2")
    other = {"name": "d"}
    assert make_security_context(pod, other).selinux_options == api_pb2.SELinuxOption(**pod_level)
    assert not make_security_context(make_pod(other), other).HasField("selinux_options")


def test_proc_mount_default_masks_and_unmasked_does_not() -> None:
    default = {"name": "c"}
    sc = make_security_context(make_pod(default), default)
    assert list(sc.masked_paths) == list(default_masked_paths())
    assert list(sc.masked_paths[: len(DEFAULT_MASKED_PATHS)]) == list(DEFAULT_MASKED_PATHS)
    assert all(p.endswith("/thermal_throttle") for p in sc.masked_paths[len(DEFAULT_MASKED_PATHS) :])
    assert list(sc.readonly_paths) == list(DEFAULT_READONLY_PATHS)
    unmasked = {"name": "c", "securityContext": {"procMount": "Unmasked"}}
    sc = make_security_context(make_pod(unmasked, hostUsers=False), unmasked)
    assert list(sc.masked_paths) == [] and list(sc.readonly_paths) == []


def test_supplemental_groups_policy() -> None:
    container = {"name": "c"}
    assert make_security_context(make_pod(container), container).supplemental_groups_policy == api_pb2.Merge
    strict = make_pod(container, securityContext={"supplementalGroupsPolicy": "Strict"})
    assert make_security_context(strict, container).supplemental_groups_policy == api_pb2.Strict
    bad = make_pod(container, securityContext={"supplementalGroupsPolicy": "Loose"})
    with pytest.raises(CreateContainerConfigError, match="unsupported supplementalGroupsPolicy: Loose"):
        make_security_context(bad, container)


def test_user_namespace_is_the_nodes() -> None:
    container = {"name": "c"}
    sc = make_security_context(make_pod(container), container)
    assert sc.namespace_options.userns_options == api_pb2.UserNamespace(mode=api_pb2.NODE)


ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
RUNTIME_DEFAULT = api_pb2.SecurityProfile(profile_type=api_pb2.SecurityProfile.RuntimeDefault)
UNCONFINED = api_pb2.SecurityProfile(profile_type=api_pb2.SecurityProfile.Unconfined)


@pytest.mark.parametrize(
    ("container_sc", "pod_sc", "annotations", "profile", "deprecated"),
    [
        ({}, {}, {}, None, ""),
        ({}, {"appArmorProfile": {"type": "RuntimeDefault"}}, {}, RUNTIME_DEFAULT, "runtime/default"),
        (
            {"appArmorProfile": {"type": "Unconfined"}},
            {"appArmorProfile": {"type": "RuntimeDefault"}},
            {},
            UNCONFINED,
            "unconfined",
        ),
        (
            {"appArmorProfile": {"type": "Localhost", "localhostProfile": "k8s-deny-write"}},
            {},
            {},
            api_pb2.SecurityProfile(profile_type=api_pb2.SecurityProfile.Localhost, localhost_ref="k8s-deny-write"),
            "localhost/k8s-deny-write",
        ),
        # The deprecated annotation comes between the container's field and the pod's.
        (
            {},
            {"appArmorProfile": {"type": "Unconfined"}},
            {ANNOTATION + "c": "runtime/default"},
            RUNTIME_DEFAULT,
            "runtime/default",
        ),
        (
            {},
            {},
            {ANNOTATION + "c": "localhost/p1"},
            api_pb2.SecurityProfile(profile_type=api_pb2.SecurityProfile.Localhost, localhost_ref="p1"),
            "localhost/p1",
        ),
        (
            {"appArmorProfile": {"type": "Unconfined"}},
            {},
            {ANNOTATION + "c": "runtime/default"},
            UNCONFINED,
            "unconfined",
        ),
        # Another container's annotation, or a value the kubelet does not know, is not this container's profile.
        ({}, {}, {ANNOTATION + "other": "runtime/default"}, None, ""),
        ({}, {}, {ANNOTATION + "c": "bogus"}, None, ""),
    ],
)
def test_apparmor_profile_reaches_cri_as_upstream(
    container_sc: dict[str, Any],
    pod_sc: dict[str, Any],
    annotations: dict[str, str],
    profile: api_pb2.SecurityProfile | None,
    deprecated: str,
) -> None:
    """The path taken on a host with AppArmor (this one has none: such pods are refused at admission)."""
    container = {"name": "c", "securityContext": container_sc}
    pod = make_pod(container, securityContext=pod_sc)
    pod["metadata"]["annotations"].update(annotations)
    assert apparmor_profile(pod, container) == (profile, deprecated)
    sc = make_security_context(pod, container)
    assert sc.apparmor_profile == deprecated
    if profile is None:
        assert not sc.HasField("apparmor")
    else:
        assert sc.apparmor == profile


def test_apparmor_localhost_without_a_name_fails_the_container() -> None:
    container = {"name": "c", "securityContext": {"appArmorProfile": {"type": "Localhost"}}}
    with pytest.raises(CreateContainerConfigError, match="missing localhost apparmor profile name"):
        make_security_context(make_pod(container), container)
