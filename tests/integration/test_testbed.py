"""Two testbeds run side by side without colliding, and `down` leaves nothing behind, even with pods running.

Each testbed's bridge exists from `up` on with its gateway address, the node's own address, where metrics-server
already listens; `down` takes the bridge and the address away with everything else."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import time
from pathlib import Path

import httpx

from cri.client import connect
from cri.v1 import api_pb2
from nodeagent.testbed import configs, hostnet, processes
from nodeagent.testbed.testbed import Testbed
from tests.integration.crifixtures import container_config, sandbox_config


def _netns() -> set[str]:
    out = subprocess.run(["ip", "-j", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {str(ns["name"]) for ns in json.loads(out or "[]")}


def _links(kind: str) -> set[str]:
    out = subprocess.run(["ip", "-j", "link", "show", "type", kind], capture_output=True, text=True, check=True)
    return {str(link["ifname"]) for link in json.loads(out.stdout or "[]")}


def _all_ipv4_addresses() -> set[str]:
    out = subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True, check=True).stdout
    return {str(a["local"]) for link in json.loads(out or "[]") for a in link.get("addr_info", [])}


def _listening(address: str, port: int) -> bool:
    out = subprocess.run(["ss", "-Htln", "src", f"{address}:{port}"], capture_output=True, text=True, check=True)
    return bool(out.stdout.strip())


def _forward_guard(bridge: str) -> bool:
    rule = ["iptables", "-w", "-C", "FORWARD", *hostnet.forward_guard_rule(bridge)]
    return subprocess.run(rule, capture_output=True, check=False).returncode == 0


def _kubernetes_service_rule(wait: float = 0.0) -> bool:
    # kube-proxy syncs its rules first after waiting (up to 30 s) for its Node, which no agent registers here.
    deadline = time.monotonic() + wait
    while True:
        nat = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True, check=True).stdout
        if f"-A KUBE-SERVICES -d {hostnet.kubernetes_service_ip()}/32" in nat:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root.resolve()) + "/"
    return [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines() if prefix in line]


async def _run_pod(other: Testbed) -> str:
    """A sandbox with a sleeping container in `other`; returns the name of the sandbox's network namespace."""
    settings = other.settings
    async with connect(f"unix://{other.layout.containerd_socket}", timeout=60) as cri:
        image = configs.busybox_image(settings)
        await cri.image.pull_image(api_pb2.ImageSpec(image=image))
        config = sandbox_config("hygiene", other.layout.root / "podlogs")
        sandbox_id = await cri.runtime.run_pod_sandbox(config)
        container_id = await cri.runtime.create_container(
            sandbox_id, container_config("sleeper", image, ["sleep", "3600"]), config
        )
        await cri.runtime.start_container(container_id)
        status = await cri.runtime.pod_sandbox_status(sandbox_id, verbose=True)
    info = json.loads(status.info["info"])
    (path,) = (ns["path"] for ns in info["runtimeSpec"]["linux"]["namespaces"] if ns["type"] == "network")
    return Path(path).name


def _ports(bridge: str) -> set[str]:
    out = subprocess.run(["ip", "-j", "link", "show", "master", bridge], capture_output=True, text=True, check=False)
    return {str(link["ifname"]) for link in json.loads(out.stdout or "[]")} if out.returncode == 0 else set()


async def _readyz(bed: Testbed) -> int:
    pki = bed.layout.pki
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    async with httpx.AsyncClient(verify=context) as http:
        return (await http.get(f"{bed.settings.apiserver_url}/readyz")).status_code


def test_second_testbed_beside_the_first_then_down_leaves_nothing(testbed: Testbed, tmp_path: Path) -> None:
    # The machine is shared: other testbeds make and remove namespaces and veths meanwhile, so only the second
    # testbed's own are counted (its sandbox's namespace, the veths on its bridge).
    other = Testbed(tmp_path / "other")
    try:
        asyncio.run(other.up())
        one, two = testbed.settings, other.settings
        ports = ("etcd_client_port", "etcd_peer_port", "apiserver_port", "registry_port", "stream_port")
        assert {getattr(one, p) for p in ports}.isdisjoint({getattr(two, p) for p in ports})
        assert one.bridge != two.bridge
        assert one.pod_cidr != two.pod_cidr
        assert testbed.layout.containerd_socket != other.layout.containerd_socket
        assert asyncio.run(_readyz(testbed)) == 200
        assert asyncio.run(_readyz(other)) == 200
        # Before any pod: the bridge carries the node address, and metrics-server listens there.
        assert one.node_ip != two.node_ip
        assert hostnet.addresses_of(two.bridge) == [f"{two.node_ip}/24"]
        assert _listening(two.node_ip, two.metrics_server_port)
        hostnet.ensure_bridge(two.bridge, two.pod_cidr)  # again: idempotent
        assert hostnet.addresses_of(two.bridge) == [f"{two.node_ip}/24"]
        # Each bridge forwards (ClusterIP traffic between pods), behind its own guard rule.
        for bridge in (one.bridge, two.bridge):
            assert Path(f"/proc/sys/net/ipv4/conf/{bridge}/forwarding").read_text().strip() == "1"
            assert _forward_guard(bridge)
        # kube-proxy's chains are host-wide: the first testbed keeps the only one, the second says who has it.
        assert not one.kube_proxy_held_by
        assert two.kube_proxy_held_by == str(testbed.layout.root.resolve())
        assert "kube-proxy" not in other.running()
        assert _kubernetes_service_rule(wait=60)
        netns = asyncio.run(_run_pod(other))
        # The pod really holds host resources that down must release.
        assert two.bridge in _links("bridge")
        assert netns in _netns()
        veths = _ports(two.bridge)
        assert len(veths) == 1 and veths <= _links("veth")
        assert _mounts_under(other.layout.root)
    finally:
        asyncio.run(other.down())
    assert other.running() == []
    assert processes.pids_with_arg("containerd-shim-runc-v2", str(other.layout.containerd_socket)) == []
    assert _mounts_under(other.layout.root) == []
    assert two.bridge not in _links("bridge")
    assert two.node_ip not in _all_ipv4_addresses()
    assert not _listening(two.node_ip, two.metrics_server_port)
    assert netns not in _netns()
    assert not veths & _links("veth")
    assert not _forward_guard(two.bridge)
    # The first testbed is untouched, its kube-proxy rules included.
    assert _forward_guard(one.bridge)
    assert _kubernetes_service_rule()
    assert asyncio.run(_readyz(testbed)) == 200
    assert one.node_ip in _all_ipv4_addresses()
    assert set(testbed.running()) == {
        "metrics-server",
        "kube-proxy",
        "kube-controller-manager",
        "kube-scheduler",
        "kube-apiserver",
        "etcd",
        "registry",
        "containerd",
        "cni-helper",
    }
