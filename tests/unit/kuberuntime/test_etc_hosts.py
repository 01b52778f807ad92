"""The kubelet-managed /etc/hosts: content (as upstream's kubelet_pods_test.go expects it, byte for byte), when a
container gets it, the file on disk, and the mount in CreateContainer through the runtime manager (the scripted CRI
runtime on a real socket)."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.kuberuntime.actions import RuntimePodStatus, SandboxState, SandboxStatus
from nodeagent.kuberuntime.errors import CreateContainerConfigError
from nodeagent.kuberuntime.etc_hosts import (
    ensure_hosts_file,
    hosts_file_content,
    hosts_mount,
    wants_hosts_mount,
)
from nodeagent.kuberuntime.manager import NodeContext, RuntimeManager
from nodeagent.kuberuntime.sandbox_config import DNSSettings
from tests.unit.cri.scripted import ScriptedRuntime

Obj = dict[str, Any]

LOCALHOST = (
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::0\tip6-localnet\n"
    "fe00::0\tip6-mcastprefix\n"
    "fe00::1\tip6-allnodes\n"
    "fe00::2\tip6-allrouters\n"
)
ALIASES = [
    {"ip": "198.18.7.1", "hostnames": ["foo.local", "bar.local"]},
    {"ip": "198.18.7.2", "hostnames": ["baz.remote"]},
]
ALIAS_LINES = "\n# Entries added by HostAliases.\n198.18.7.1\tfoo.local\tbar.local\n198.18.7.2\tbaz.remote\n"
NODE_HOSTS = b"127.0.0.1\tlocalhost\n198.19.0.1\tnode-1 node-1.example\n"


def pod(name: str = "web", **spec: Any) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "ns1", "uid": "u-1"},
        "spec": {"containers": [{"name": "app", "image": "busybox:1"}], **spec},
    }


@pytest.mark.parametrize(
    ("the_pod", "ips", "node_hosts", "expected"),
    [
        (pod(), ["198.18.0.5"], None, "# Kubernetes-managed hosts file.\n" + LOCALHOST + "198.18.0.5\tweb\n"),
        (
            pod(hostname="h1"),
            ["198.18.0.5"],
            None,
            "# Kubernetes-managed hosts file.\n" + LOCALHOST + "198.18.0.5\th1\n",
        ),
        (
            pod(hostname="h1", subdomain="sub"),
            ["198.18.0.5"],
            None,
            "# Kubernetes-managed hosts file.\n" + LOCALHOST + "198.18.0.5\th1.sub.ns1.svc.cluster.local\th1\n",
        ),
        (  # every pod IP names the pod (dual stack), primary first
            pod(subdomain="sub"),
            ["198.18.0.5", "2001:db8::5"],
            None,
            "# Kubernetes-managed hosts file.\n"
            + LOCALHOST
            + "198.18.0.5\tweb.sub.ns1.svc.cluster.local\tweb\n2001:db8::5\tweb.sub.ns1.svc.cluster.local\tweb\n",
        ),
        (
            pod(hostname="h1", subdomain="sub", hostAliases=ALIASES),
            ["198.18.0.5"],
            None,
            "# Kubernetes-managed hosts file.\n"
            + LOCALHOST
            + "198.18.0.5\th1.sub.ns1.svc.cluster.local\th1\n"
            + ALIAS_LINES,
        ),
        (  # a name longer than 63 characters is cut, trailing '-' dropped, as the sandbox's hostname
            pod(name="a" * 62 + "-bc"),
            ["198.18.0.5"],
            None,
            "# Kubernetes-managed hosts file.\n" + LOCALHOST + "198.18.0.5\t" + "a" * 62 + "\n",
        ),
        (  # an alias without hostnames still gets its line, as upstream's strings.Join of nothing
            pod(hostAliases=[{"ip": "198.18.7.3"}]),
            ["198.18.0.5"],
            None,
            "# Kubernetes-managed hosts file.\n"
            + LOCALHOST
            + "198.18.0.5\tweb\n\n# Entries added by HostAliases.\n198.18.7.3\t\n",
        ),
        (  # the host network: the node's file as it is, whatever the pod's names
            pod(hostNetwork=True, hostname="h1", subdomain="sub"),
            [],
            NODE_HOSTS,
            "# Kubernetes-managed hosts file (host network).\n" + NODE_HOSTS.decode(),
        ),
        (
            pod(hostNetwork=True, hostAliases=ALIASES),
            ["198.19.0.1"],
            NODE_HOSTS,
            "# Kubernetes-managed hosts file (host network).\n" + NODE_HOSTS.decode() + ALIAS_LINES,
        ),
        (  # a node file without a final newline is kept as it is (upstream appends the aliases' blank line)
            pod(hostNetwork=True, hostAliases=ALIASES[1:]),
            [],
            b"127.0.0.1 localhost",
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost"
            "\n# Entries added by HostAliases.\n198.18.7.2\tbaz.remote\n",
        ),
    ],
    ids=[
        "pod-name",
        "hostname",
        "subdomain",
        "dual-stack",
        "aliases",
        "long-name",
        "alias-without-names",
        "host-network",
        "host-network-aliases",
        "host-network-no-newline",
    ],
)
def test_content(the_pod: Obj, ips: list[str], node_hosts: bytes | None, expected: str) -> None:
    assert hosts_file_content(the_pod, ips, cluster_domain="cluster.local", node_hosts=node_hosts) == expected.encode()


@pytest.mark.parametrize(
    ("spec", "mounts", "ips", "wanted"),
    [
        ({}, [], ["198.18.0.5"], True),
        ({}, [], [], False),  # no IP yet: the sandbox is not up
        ({"hostNetwork": True}, [], [], True),
        ({}, [{"name": "v", "mountPath": "/etc/hosts"}], ["198.18.0.5"], False),
        ({"hostNetwork": True}, [{"name": "v", "mountPath": "/etc/hosts"}], [], False),
        ({}, [{"name": "v", "mountPath": "/etc"}], ["198.18.0.5"], True),  # as upstream: only the exact path
        ({}, [{"name": "v", "mountPath": "/etc/hosts.d"}], ["198.18.0.5"], True),
    ],
    ids=["pod-ip", "no-ip", "host-network", "own-mount", "own-mount-host-network", "etc-dir", "other-file"],
)
def test_which_containers_get_it(spec: Obj, mounts: list[Obj], ips: list[str], wanted: bool) -> None:
    the_pod = pod(**spec)
    container = {"name": "app", "volumeMounts": mounts}
    assert wants_hosts_mount(the_pod, container, ips) is wanted


def test_the_mount() -> None:
    assert hosts_mount("/r/pods/u-1/etc-hosts", selinux=True) == api_pb2.Mount(
        container_path="/etc/hosts", host_path="/r/pods/u-1/etc-hosts", readonly=False, selinux_relabel=True
    )
    # Without SELinux on the host the kubelet asks for no relabel (makeMounts: SELinuxRelabel && GetEnabled()).
    assert not hosts_mount("/r/pods/u-1/etc-hosts", selinux=False).selinux_relabel


# --- on disk ---------------------------------------------------------------------------------------------------


@pytest.fixture
def strict_umask() -> Iterator[None]:
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def test_written_0644_whatever_the_umask_and_rewritten_in_place(tmp_path: Path, strict_umask: None) -> None:
    path = tmp_path / "pods" / "u-1" / "etc-hosts"  # the pod directory is made when missing
    ensure_hosts_file(str(path), pod(hostAliases=ALIASES), ["198.18.0.5"], cluster_domain="cluster.local")
    first = path.stat()
    assert stat.S_IMODE(first.st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "pods" / "u-1").stat().st_mode) == 0o700  # 0750 less the umask, as mkdir
    assert path.read_bytes().endswith(ALIAS_LINES.encode())
    # A container edited it; the next container start writes it again, in place: containers share one inode.
    path.write_text("edited by a container, and longer than the file itself would ever be\n" * 40)
    ensure_hosts_file(str(path), pod(hostAliases=ALIASES), ["198.18.0.5"], cluster_domain="cluster.local")
    again = path.stat()
    assert again.st_ino == first.st_ino
    assert path.read_bytes() == hosts_file_content(
        pod(hostAliases=ALIASES), ["198.18.0.5"], cluster_domain="cluster.local", node_hosts=None
    )


def test_host_network_copies_the_node_file(tmp_path: Path) -> None:
    node = tmp_path / "hosts"
    node.write_bytes(NODE_HOSTS)
    path = tmp_path / "etc-hosts"
    ensure_hosts_file(str(path), pod(hostNetwork=True), [], cluster_domain="cluster.local", node_hosts_path=str(node))
    assert path.read_bytes() == b"# Kubernetes-managed hosts file (host network).\n" + NODE_HOSTS


def test_failures_are_container_config_errors_in_gos_words(tmp_path: Path) -> None:
    missing = tmp_path / "no-hosts"
    with pytest.raises(
        CreateContainerConfigError, match=f"^{re.escape(f'open {missing}')}: no such file or directory$"
    ):
        ensure_hosts_file(
            str(tmp_path / "etc-hosts"),
            pod(hostNetwork=True),
            [],
            cluster_domain="cluster.local",
            node_hosts_path=str(missing),
        )
    assert not (tmp_path / "etc-hosts").exists()
    (tmp_path / "file").write_text("")
    with pytest.raises(CreateContainerConfigError, match=r"^mkdir .*: not a directory$"):
        ensure_hosts_file(str(tmp_path / "file" / "u" / "etc-hosts"), pod(), ["198.18.0.5"], cluster_domain="c")


# --- through the runtime manager -------------------------------------------------------------------------------

SANDBOX = SandboxStatus(id="s1", state=SandboxState.READY, attempt=0, created_at=1, ip="198.18.0.5", host_network=False)


def _script(runtime: ScriptedRuntime, ip: str) -> None:
    runtime.script["ImageStatus"] = api_pb2.ImageStatusResponse(image=api_pb2.Image(id="sha256:1", size=1))
    runtime.script["CreateContainer"] = api_pb2.CreateContainerResponse(container_id="new")
    runtime.script["PodSandboxStatus"] = api_pb2.PodSandboxStatusResponse(
        status=api_pb2.PodSandboxStatus(
            id="s1",
            created_at=1,
            metadata=api_pb2.PodSandboxMetadata(name="web", namespace="ns1", uid="u-1", attempt=0),
            network=api_pb2.PodSandboxNetworkStatus(ip=ip),
        )
    )


def _created_mounts(runtime: ScriptedRuntime) -> dict[str, list[api_pb2.Mount]]:
    out = {}
    for call in runtime.calls_of("CreateContainer"):
        assert isinstance(call.request, api_pb2.CreateContainerRequest)
        out[call.request.config.metadata.name] = list(call.request.config.mounts)
    return out


async def _sync(client: CRIClient, root: Path, the_pod: Obj) -> None:
    node = NodeContext(
        node_name="n1",
        host_ip="127.0.0.1",
        pod_log_dir_root=str(root / "logs"),
        root_dir=str(root),
        dns=DNSSettings(cluster_domain="cluster.local"),
        node_hosts_file=str(root / "node-hosts"),
    )
    status = RuntimePodStatus(uid="u-1", name="web", namespace="ns1", sandboxes=(SANDBOX,), containers=())
    await RuntimeManager(client.runtime, client.image, node).sync_pod(the_pod, status)


async def test_each_container_gets_the_pods_file_unless_it_mounts_its_own(
    runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path
) -> None:
    _script(runtime, "198.18.0.5")
    the_pod = pod(
        hostname="h1",
        subdomain="sub",
        hostAliases=ALIASES,
        containers=[
            {"name": "app", "image": "busybox:1", "terminationMessagePath": "/dev/termination-log"},
            {"name": "own", "image": "busybox:1", "volumeMounts": [{"name": "v", "mountPath": "/etc/hosts"}]},
        ],
    )
    await _sync(client, tmp_path, the_pod)
    hosts = tmp_path / "pods" / "u-1" / "etc-hosts"
    assert hosts.read_bytes() == hosts_file_content(
        the_pod, ["198.18.0.5"], cluster_domain="cluster.local", node_hosts=None
    )
    mounts = _created_mounts(runtime)
    # After the volume mounts (none here), before the termination message file, as upstream orders them.
    assert [m.container_path for m in mounts["app"]] == ["/etc/hosts", "/dev/termination-log"]
    assert mounts["app"][0] == hosts_mount(str(hosts))
    # "own" mounts a volume there (not set up in this test: no volume manager), so no managed file for it.
    assert "/etc/hosts" not in [m.container_path for m in mounts.get("own", [])]


async def test_no_file_before_the_pod_has_an_ip(runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path) -> None:
    _script(runtime, "")
    await _sync(client, tmp_path, pod())
    assert not (tmp_path / "pods" / "u-1" / "etc-hosts").exists()
    assert "/etc/hosts" not in [m.container_path for m in _created_mounts(runtime)["app"]]


async def test_an_unreadable_node_file_fails_the_container_config(
    runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path
) -> None:
    _script(runtime, "")
    the_pod = pod(hostNetwork=True)
    node = NodeContext(
        node_name="n1",
        host_ip="127.0.0.1",
        pod_log_dir_root=str(tmp_path / "logs"),
        root_dir=str(tmp_path),
        node_hosts_file=str(tmp_path / "missing"),
    )
    sandbox = SandboxStatus(id="s1", state=SandboxState.READY, attempt=0, created_at=1, ip="", host_network=True)
    status = RuntimePodStatus(uid="u-1", name="web", namespace="ns1", sandboxes=(sandbox,), containers=())
    result = await RuntimeManager(client.runtime, client.image, node).sync_pod(the_pod, status)
    assert result.waiting["app"].reason == "CreateContainerConfigError"
    assert result.waiting["app"].message == f"open {tmp_path / 'missing'}: no such file or directory"
    assert runtime.calls_of("CreateContainer") == []
