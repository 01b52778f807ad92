"""The kubelet-managed /etc/hosts on the real testbed (`nodeagent run`, real containerd).

A pod with a hostname, a subdomain and two hostAliases: its container's /etc/hosts (read over CRI ExecSync) is
upstream's file byte for byte, with the pod's IP from the apiserver, and the same bytes are in
`<root>/pods/<uid>/etc-hosts` (0644); a restarted container gets it again. Containers of the same pod that mount
their own volume at /etc/hosts (a hostPath file, an emptyDir) see their volume, not the managed file. A hostNetwork
pod gets the host-network header, the node's own /etc/hosts and its aliases. Once the pods are deleted, their files
and pod directories go (the housekeeping's orphan sweep). The expected content is written out here, not computed by
the agent's code.
"""

from __future__ import annotations

import asyncio
import contextlib
import stat
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from cri.client import CRIClient
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import NS, Agent, clean_up, eventually, node_ready, start_agent, stop_agent
from tests.integration.test_volumes import busybox, cat, cstatus, exec_out, get_pod, run_pod, running_id, wait_running

Obj = dict[str, Any]
PREFIX = "hosts-"
ALIASES = [
    {"ip": "198.18.7.1", "hostnames": ["foo.local", "bar.local"]},
    {"ip": "198.18.7.2", "hostnames": ["baz.remote"]},
]
ALIAS_LINES = "\n# Entries added by HostAliases.\n198.18.7.1\tfoo.local\tbar.local\n198.18.7.2\tbaz.remote\n"
LOCALHOST = (
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::0\tip6-localnet\n"
    "fe00::0\tip6-mcastprefix\n"
    "fe00::1\tip6-allnodes\n"
    "fe00::2\tip6-allrouters\n"
)
OWN_HOSTS = "198.18.9.9\tmine.local\n"


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-etc-hosts.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


@pytest.fixture(scope="module")
def root(testbed: Testbed) -> Path:
    return Path(testbed.layout.kubelet_root)


@pytest_asyncio.fixture(loop_scope="session")
async def ready(agent: Agent, admin: KubeClient, settings: Settings) -> AsyncIterator[None]:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=agent)
    yield
    for pod in (await admin.list(paths.pods(NS)))["items"]:
        if pod["metadata"]["name"].startswith(PREFIX):
            with contextlib.suppress(NotFound):
                await admin.delete(paths.pod(NS, pod["metadata"]["name"]), grace_period_seconds=0)


def _name(what: str) -> str:
    return f"{PREFIX}{what}-{uuid.uuid4().hex[:5]}"


async def _gone(admin: KubeClient, agent: Agent, root: Path, name: str, uid: str) -> None:
    """Delete the pod; its etc-hosts and then its whole pod directory leave the root dir."""
    await admin.delete(paths.pod(NS, name))

    async def nothing_left() -> bool:
        return not (root / "pods" / uid).exists()

    await eventually(nothing_left, timeout=90, what=f"pods/{uid} removed", agent=agent)


async def test_pod_network_pod_gets_upstreams_file_with_its_ip_and_aliases(
    ready: None,
    agent: Agent,
    admin: KubeClient,
    settings: Settings,
    cri_client: CRIClient,
    root: Path,
    tmp_path: Path,
) -> None:
    own = tmp_path / "own-hosts"
    own.write_text(OWN_HOSTS)
    name = _name("pod")
    containers = [
        busybox(settings),
        busybox(settings, "own-file", volumeMounts=[{"name": "own", "mountPath": "/etc/hosts"}]),
        busybox(settings, "own-dir", volumeMounts=[{"name": "scratch", "mountPath": "/etc/hosts"}]),
    ]
    volumes = [
        {"name": "own", "hostPath": {"path": str(own), "type": "File"}},
        {"name": "scratch", "emptyDir": {}},
    ]
    created = await run_pod(
        admin,
        name,
        containers,
        volumes=volumes,
        hostname="h1",
        subdomain="sub",
        hostAliases=ALIASES,
        restartPolicy="Always",
    )
    uid = created["metadata"]["uid"]
    for container in ("own-file", "own-dir"):
        await wait_running(admin, agent, name, container)
    pod = await wait_running(admin, agent, name)
    pod_ip = pod["status"]["podIP"]
    assert pod_ip.startswith("198.18."), pod_ip
    expected = (
        "# Kubernetes-managed hosts file.\n"
        + LOCALHOST
        + f"{pod_ip}\th1.sub.{NS}.svc.cluster.local\th1\n"
        + ALIAS_LINES
    )

    assert await cat(cri_client, running_id(pod), "/etc/hosts") == expected
    on_disk = root / "pods" / uid / "etc-hosts"
    assert on_disk.read_text() == expected
    assert stat.S_IMODE(on_disk.stat().st_mode) == 0o644
    # A container that mounts its own volume there sees the volume, as upstream.
    assert await cat(cri_client, running_id(pod, "own-file"), "/etc/hosts") == OWN_HOSTS
    code, out = await exec_out(cri_client, running_id(pod, "own-dir"), "test", "-d", "/etc/hosts")
    assert code == 0, out
    assert own.read_text() == OWN_HOSTS  # the hostPath file is not the agent's to write

    # A restarted container gets the pod's file again (upstream writes it before each container is created).
    first = running_id(pod)
    await cri_client.runtime.stop_container(first, 0)

    async def restarted() -> Obj | None:
        now = await get_pod(admin, name)
        return now if running_id(now) not in ("", first) and cstatus(now).get("restartCount") == 1 else None

    again = await eventually(restarted, timeout=90, what=f"{name} restarted", agent=agent)
    assert await cat(cri_client, running_id(again), "/etc/hosts") == expected
    assert on_disk.read_text() == expected

    await _gone(admin, agent, root, name, uid)


async def test_host_network_pod_gets_the_nodes_file_and_its_aliases(
    ready: None, agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient, root: Path
) -> None:
    name = _name("hostnet")
    created = await run_pod(admin, name, [busybox(settings)], hostNetwork=True, hostAliases=ALIASES)
    uid = created["metadata"]["uid"]
    pod = await wait_running(admin, agent, name)
    node_hosts = await asyncio.to_thread(Path("/etc/hosts").read_text)
    expected = "# Kubernetes-managed hosts file (host network).\n" + node_hosts + ALIAS_LINES

    assert await cat(cri_client, running_id(pod), "/etc/hosts") == expected
    assert (root / "pods" / uid / "etc-hosts").read_text() == expected

    await _gone(admin, agent, root, name, uid)


async def test_a_pod_without_aliases_gets_no_alias_section(
    ready: None, agent: Agent, admin: KubeClient, settings: Settings, cri_client: CRIClient, root: Path
) -> None:
    name = _name("plain")
    created = await run_pod(admin, name, [busybox(settings)])
    uid = created["metadata"]["uid"]
    pod = await wait_running(admin, agent, name)
    pod_ip = pod["status"]["podIP"]
    # No subdomain: the pod's IP names only its hostname, here the pod's name.
    expected = "# Kubernetes-managed hosts file.\n" + LOCALHOST + f"{pod_ip}\t{name}\n"
    assert await cat(cri_client, running_id(pod), "/etc/hosts") == expected

    await _gone(admin, agent, root, name, uid)
