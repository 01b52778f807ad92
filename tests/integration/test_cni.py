"""The CNI plugin on the real kernel and under the testbed's containerd.

Two parts:
- the Network contract scenarios (tests/unit/cni/contract.py) and the installed executable, on pyroute2 and real
  network namespaces, with a bridge, namespaces and a /24 of 198.18.0.0/15 of their own (no testbed needed);
- through containerd (RunPodSandbox / StopPodSandbox / RemovePodSandbox): addresses from the testbed's range,
  pod-to-pod ping, host-to-pod HTTP, hostPort through the chained reference portmap, lo brought up by the
  reference loopback plugin containerd runs first, nothing left after removal, the in-process fallback when the
  helper is down, and 200 create/delete cycles without a leak.

Every bridge, namespace and veth a test makes is removed in a `finally`, also when the test fails; so is every
sandbox (the `sandboxes` fixture tracks them from creation and removes what a test left), and with it the veth,
address and namespace our plugin gave it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

import httpx
import pytest
import pytest_asyncio

from cni.install import install
from cni.netlink import Netlink
from cni.network import Network, host_veth_name
from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.testbed import cniplugin, configs, hostnet, processes
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.crifixtures import container_config, sandbox_config
from tests.unit.cni import contract

T = TypeVar("T")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _ports(bridge: str) -> set[str]:
    out = _ip("-j", "link", "show", "master", bridge, check=False).stdout
    return {str(link["ifname"]) for link in json.loads(out or "[]")}


class RealBench:
    """A bridge, namespaces and a subnet that belong to one test, on the real kernel."""

    def __init__(self, tmp_path: Path) -> None:
        self.tag = uuid.uuid4().hex[:8]
        self.bridge = f"nact{self.tag}"
        self.subnet = hostnet.choose_pod_cidr(tmp_path / self.tag, taken=set())
        self.data_dir = tmp_path / "ipam"
        self.made: list[str] = []

    def network(self) -> Network:
        return Netlink()

    def new_netns(self) -> str:
        name = f"nacni-{self.tag}-{len(self.made)}"
        _ip("netns", "add", name)
        self.made.append(name)
        return f"/run/netns/{name}"

    def remove_netns(self, path: str) -> None:
        _ip("netns", "del", Path(path).name)

    def drop_address(self, netns: str, ifname: str) -> None:
        _ip("-n", Path(netns).name, "-4", "addr", "flush", "dev", ifname)

    def add_foreign_veth(self, netns: str, ifname: str) -> None:
        # The host end goes with the namespace (cleanup deletes it), or with the bridge's leftovers.
        peer = f"naf{self.tag}{len(self.made)}"[:15]
        _ip("link", "add", peer, "type", "veth", "peer", "name", ifname, "netns", Path(netns).name)

    def rename_host_link(self, old: str, new: str) -> None:
        _ip("link", "set", "dev", old, "down")  # the kernel renames only a link that is down
        _ip("link", "set", "dev", old, "name", new)

    def cleanup(self) -> None:
        for name in self.made:
            _ip("netns", "del", name, check=False)
        hostnet.remove_bridge_leftovers(self.bridge)


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[RealBench]:
    b = RealBench(tmp_path)
    try:
        yield b
    finally:
        b.cleanup()
    assert not hostnet.link_exists(b.bridge)
    listed = _ip("netns", "list").stdout
    assert all(name not in listed for name in b.made)


@pytest.mark.parametrize("scenario", contract.SCENARIOS, ids=lambda s: s.__name__)
def test_contract_on_the_kernel(scenario: object, bench: RealBench) -> None:
    scenario(bench)  # type: ignore[operator]


def _exec_plugin(plugin: Path, env: dict[str, str], conf: dict[str, object]) -> subprocess.CompletedProcess[bytes]:
    # As containerd runs it: the CNI_* variables only, from an unrelated working directory.
    return subprocess.run(
        [str(plugin)], env=env, input=json.dumps(conf).encode(), capture_output=True, cwd="/", timeout=120, check=False
    )


def test_installed_plugin_works_through_its_helper_and_without_it(bench: RealBench, tmp_path: Path) -> None:
    sock = tmp_path / "helper.sock"
    plugin = install(tmp_path / "bin", helper_socket=sock)
    conf = contract.netconf(bench)
    helper = subprocess.Popen(plugin.helper_argv(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd="/")
    try:
        deadline = time.monotonic() + 60
        while not sock.exists() and helper.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sock.exists(), "the helper did not come up"
        for mode in ("helper", "in-process"):
            if mode == "in-process":
                helper.terminate()
                helper.wait(30)
                assert not sock.exists()
            netns = bench.new_netns()
            env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": f"exec-{mode}", "CNI_NETNS": netns, "CNI_IFNAME": "eth0"}
            added = _exec_plugin(plugin.path, env, conf)
            assert added.returncode == 0, (mode, added.stdout, added.stderr)
            result = json.loads(added.stdout)
            veth = host_veth_name(contract.NETWORK, f"exec-{mode}", "eth0")
            assert veth in _ports(bench.bridge)
            inside = _ip("-n", Path(netns).name, "-j", "addr", "show", "dev", "eth0").stdout
            assert result["ips"][0]["address"].split("/")[0] in inside
            checked = _exec_plugin(plugin.path, {**env, "CNI_COMMAND": "CHECK"}, {**conf, "prevResult": result})
            assert (checked.returncode, checked.stdout) == (0, b""), checked.stdout
            deleted = _exec_plugin(plugin.path, {**env, "CNI_COMMAND": "DEL"}, conf)
            assert (deleted.returncode, deleted.stdout) == (0, b"")
            assert veth not in _ports(bench.bridge)
    finally:
        if helper.poll() is None:
            helper.terminate()
        out = helper.communicate(timeout=30)[0].decode()
    assert "cni request command=ADD" in out and "command=CHECK" in out and "command=DEL" in out
    assert contract.allocations(bench) == []


def test_fifty_concurrent_adds_through_the_helper_share_no_address(bench: RealBench, tmp_path: Path) -> None:
    sock = tmp_path / "helper.sock"
    plugin = install(tmp_path / "bin", helper_socket=sock)
    conf = json.dumps(contract.netconf(bench)).encode()
    namespaces = [bench.new_netns() for _ in range(50)]
    helper = subprocess.Popen(plugin.helper_argv(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd="/")
    try:
        deadline = time.monotonic() + 60
        while not sock.exists() and helper.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sock.exists(), "the helper did not come up"

        def spawn(command: str, i: int) -> subprocess.Popen[bytes]:
            env = {"CNI_COMMAND": command, "CNI_CONTAINERID": f"many{i}", "CNI_NETNS": namespaces[i]}
            return subprocess.Popen(
                [str(plugin.path)],
                env={**env, "CNI_IFNAME": "eth0"},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd="/",
            )

        adds = [spawn("ADD", i) for i in range(50)]
        replies = [p.communicate(conf, timeout=120) for p in adds]
        assert [p.returncode for p in adds] == [0] * 50, [r for r in replies if b'"code"' in r[0]][:3]
        addresses = [json.loads(out)["ips"][0]["address"] for out, _ in replies]
        assert len(set(addresses)) == 50
        assert len(contract.allocations(bench)) == 50
        assert len(_ports(bench.bridge)) == 50
        dels = [spawn("DEL", i) for i in range(50)]
        for p in dels:
            p.communicate(conf, timeout=120)
        assert [p.returncode for p in dels] == [0] * 50
        assert contract.allocations(bench) == []
        assert _ports(bench.bridge) == set()
    finally:
        helper.terminate()
        out = helper.communicate(timeout=30)[0].decode()
    assert out.count("cni request command=ADD") == 50


# --- through containerd ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sandbox:
    id: str
    ip: str
    netns: str
    config: api_pb2.PodSandboxConfig


async def remove_sandbox(cri: CRIClient, sandbox_id: str) -> None:
    await cri.runtime.stop_pod_sandbox(sandbox_id)
    await cri.runtime.remove_pod_sandbox(sandbox_id)


class Sandboxes:
    """Every sandbox a test creates, removed at the end of the test whatever happened (the fixture's finally).

    A sandbox is tracked from the moment containerd names it, before its status is read, so that a failure between
    the two leaves nothing behind either. Removing it through `remove` untracks it; the rest go at teardown.
    """

    def __init__(self, cri: CRIClient, log_dir: Path) -> None:
        self.cri = cri
        self.log_dir = log_dir
        self.live: dict[str, str] = {}  # sandbox ID -> name

    async def run(self, name: str, ports: tuple[api_pb2.PortMapping, ...] = ()) -> Sandbox:
        config = sandbox_config(name, self.log_dir / name)
        config.port_mappings.extend(ports)
        sandbox_id = await self.cri.runtime.run_pod_sandbox(config)
        self.live[sandbox_id] = name
        status = await self.cri.runtime.pod_sandbox_status(sandbox_id, verbose=True)
        info = json.loads(status.info["info"])
        netns = next(ns["path"] for ns in info["runtimeSpec"]["linux"]["namespaces"] if ns["type"] == "network")
        return Sandbox(sandbox_id, status.status.network.ip, netns, config)

    async def run_many(self, names: list[str]) -> list[Sandbox]:
        """Concurrently; every creation finishes (and is tracked) before a failure among them is raised."""
        return await _all(*(self.run(name) for name in names))

    async def remove(self, *sandboxes: Sandbox) -> None:
        await _all(*(self._remove(s.id) for s in sandboxes))

    async def _remove(self, sandbox_id: str) -> None:
        await remove_sandbox(self.cri, sandbox_id)
        self.live.pop(sandbox_id, None)

    async def remove_all(self) -> list[str]:
        """Remove what is left; returns what could not be removed (one line each)."""
        failed = []
        for sandbox_id, name in list(self.live.items()):
            try:
                await self._remove(sandbox_id)
            except Exception as exc:  # teardown goes on to the next one
                failed.append(f"{name} ({sandbox_id[:12]}): {exc!r}")
        return failed


async def _all(*aws: Awaitable[T]) -> list[T]:
    results = await asyncio.gather(*aws, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return cast(list[T], results)


@pytest_asyncio.fixture
async def sandboxes(cri_client: CRIClient, tmp_path: Path) -> AsyncIterator[Sandboxes]:
    tracked = Sandboxes(cri_client, tmp_path / "logs")
    try:
        yield tracked
    finally:
        failed = await tracked.remove_all()
    assert failed == [], "sandboxes left behind"


async def start(cri: CRIClient, sandbox: Sandbox, name: str, image: str, command: list[str]) -> str:
    container_id = await cri.runtime.create_container(
        sandbox.id, container_config(name, image, command), sandbox.config
    )
    await cri.runtime.start_container(container_id)
    return container_id


def _network_name(settings: Settings) -> str:
    return f"nodeagent-{settings.bridge}"


def _allocated(testbed: Testbed) -> set[str]:
    d = testbed.layout.cni_data_dir / _network_name(testbed.settings)
    return {p.name for p in d.iterdir() if p.name[0].isdigit()} if d.exists() else set()


def _in_pod_cidr(ip: str, settings: Settings) -> bool:
    address = ipaddress.ip_address(ip)
    return address in ipaddress.ip_network(settings.pod_cidr) and address in ipaddress.ip_network("198.18.0.0/15")


async def _wait_http(url: str, timeout: float = 60) -> httpx.Response:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    async with httpx.AsyncClient(timeout=5) as http:
        while time.monotonic() < deadline:
            try:
                return await http.get(url)
            except httpx.HTTPError as exc:
                last = exc
                await asyncio.sleep(0.3)
    raise AssertionError(f"{url} did not answer within {timeout}s: {last!r}")


async def test_pods_get_addresses_from_our_plugin_and_reach_each_other(
    cri_client: CRIClient, sandboxes: Sandboxes, testbed: Testbed, settings: Settings
) -> None:
    image = configs.busybox_image(settings)
    await cri_client.image.pull_image(api_pb2.ImageSpec(image=image))
    server = await sandboxes.run("cni-server")
    client = await sandboxes.run("cni-client")
    for pod in (server, client):
        assert _in_pod_cidr(pod.ip, settings), pod.ip
        # The host end carries our plugin's name for this attachment: ours made it, not the reference bridge.
        assert host_veth_name(_network_name(settings), pod.id, "eth0") in _ports(settings.bridge)
    assert server.ip != client.ip
    assert {server.ip, client.ip} <= _allocated(testbed)
    await start(
        cri_client,
        server,
        "httpd",
        image,
        ["sh", "-c", "echo hello-from-server > /var/www/index.html && exec httpd -f -p 8080 -h /var/www"],
    )
    sleeper = await start(cri_client, client, "pinger", image, ["sleep", "3600"])
    # Pod to pod, from one network namespace into the other, across the bridge.
    ping = await cri_client.runtime.exec_sync(sleeper, ["ping", "-c", "2", "-W", "5", server.ip], timeout=30)
    assert ping.exit_code == 0, ping.stdout + ping.stderr
    fetched = await cri_client.runtime.exec_sync(
        sleeper, ["wget", "-q", "-O", "-", f"http://{server.ip}:8080/"], timeout=30
    )
    assert fetched.stdout.strip() == b"hello-from-server"
    # Host to pod: the host reaches the pod through the bridge's gateway address.
    resp = await _wait_http(f"http://{server.ip}:8080/")
    assert resp.status_code == 200 and resp.text.strip() == "hello-from-server"
    # The pod's default route goes via the gateway on the bridge.
    route = await cri_client.runtime.exec_sync(sleeper, ["ip", "route"], timeout=30)
    gateway = settings.pod_cidr.rsplit(".", 1)[0] + ".1"
    assert f"default via {gateway}" in route.stdout.decode()
    await sandboxes.remove(server, client)
    for pod in (server, client):
        assert host_veth_name(_network_name(settings), pod.id, "eth0") not in _ports(settings.bridge)
        assert pod.ip not in _allocated(testbed)
        assert not _exists(pod.netns)


async def test_the_chained_loopback_plugin_brings_lo_up(
    cri_client: CRIClient, sandboxes: Sandboxes, settings: Settings
) -> None:
    """containerd runs the reference `loopback` plugin for every sandbox; a fresh namespace's lo is down and has no
    address (the kernel adds 127.0.0.1/8 only when lo comes up), so each check below fails without it."""
    image = configs.busybox_image(settings)
    await cri_client.image.pull_image(api_pb2.ImageSpec(image=image))
    pod = await sandboxes.run("cni-loopback")
    sleeper = await start(cri_client, pod, "sleeper", image, ["sleep", "3600"])
    # operstate says "unknown" for lo whether or not it is up; the IFF_UP bit of its flags does not.
    flags = await cri_client.runtime.exec_sync(sleeper, ["cat", "/sys/class/net/lo/flags"], timeout=30)
    assert flags.exit_code == 0, flags.stderr
    assert int(flags.stdout.decode().strip(), 16) & 0x1, f"lo is down: flags {flags.stdout!r}"
    shown = await cri_client.runtime.exec_sync(sleeper, ["ip", "-4", "addr", "show", "dev", "lo"], timeout=30)
    assert shown.exit_code == 0, shown.stderr
    assert "inet 127.0.0.1/8" in shown.stdout.decode(), shown.stdout
    ping = await cri_client.runtime.exec_sync(sleeper, ["ping", "-c", "1", "-W", "5", "127.0.0.1"], timeout=30)
    assert ping.exit_code == 0, ping.stdout + ping.stderr


def _nat_rules() -> str:
    return subprocess.run(["iptables", "-t", "nat", "-S"], capture_output=True, text=True, check=True).stdout


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_host_port_goes_through_the_chained_portmap(
    cri_client: CRIClient, sandboxes: Sandboxes, settings: Settings
) -> None:
    image = configs.busybox_image(settings)
    await cri_client.image.pull_image(api_pb2.ImageSpec(image=image))
    host_port = _free_port()
    mapping = api_pb2.PortMapping(protocol=api_pb2.TCP, container_port=8080, host_port=host_port)
    pod = await sandboxes.run("cni-hostport", (mapping,))
    await start(
        cri_client,
        pod,
        "httpd",
        image,
        ["sh", "-c", "echo via-hostport > /var/www/index.html && exec httpd -f -p 8080 -h /var/www"],
    )
    # portmap DNATs the host port to the address our result put on eth0: it read our prevResult.
    gateway = settings.pod_cidr.rsplit(".", 1)[0] + ".1"
    resp = await _wait_http(f"http://{gateway}:{host_port}/")
    assert resp.text.strip() == "via-hostport"
    rules = _nat_rules()
    assert f"--dport {host_port}" in rules and pod.ip in rules
    await sandboxes.remove(pod)
    rules = _nat_rules()
    assert f"--dport {host_port} " not in rules


async def test_without_the_helper_containerd_still_gets_its_network(
    sandboxes: Sandboxes, testbed: Testbed, settings: Settings
) -> None:
    lay = testbed.layout
    helper = processes.load(lay.pids, cniplugin.HELPER)
    assert helper is not None and helper.alive()
    processes.stop(helper, pid_dir=lay.pids)
    try:
        assert not lay.cni_helper_socket.exists()
        pod = await sandboxes.run("cni-no-helper")
        assert _in_pod_cidr(pod.ip, settings)
        assert host_veth_name(_network_name(settings), pod.id, "eth0") in _ports(settings.bridge)
        await sandboxes.remove(pod)
        assert pod.ip not in _allocated(testbed)
        assert host_veth_name(_network_name(settings), pod.id, "eth0") not in _ports(settings.bridge)
    finally:
        restarted = processes.start(cniplugin.HELPER, helper.argv, pid_dir=lay.pids, log_dir=lay.logs)
        deadline = time.monotonic() + 60
        while not await cniplugin.helper_ready(lay) and time.monotonic() < deadline:
            assert restarted.alive(), processes.tail(restarted.log_path)
            await asyncio.sleep(0.1)
    # The restarted helper serves again.
    pod = await sandboxes.run("cni-helper-back")
    await sandboxes.remove(pod)
    assert f"command=ADD container={pod.id[:12]}" in restarted.log_path.read_text()


async def test_two_hundred_pod_cycles_leak_nothing(
    cri_client: CRIClient, sandboxes: Sandboxes, testbed: Testbed, settings: Settings
) -> None:
    ports_before, allocated_before = _ports(settings.bridge), _allocated(testbed)
    seen: list[Sandbox] = []
    batch = 10
    for round_ in range(200 // batch):
        pods = await sandboxes.run_many([f"cycle-{round_}-{i}" for i in range(batch)])
        seen.extend(pods)
        assert len({p.ip for p in pods}) == batch, "two live pods share an address"
        assert all(_in_pod_cidr(p.ip, settings) for p in pods)
        await sandboxes.remove(*pods)
    assert len(seen) == 200
    assert _ports(settings.bridge) == ports_before, "a veth leaked"
    assert _allocated(testbed) == allocated_before, "an address leaked"
    leaked_netns = [p.netns for p in seen if _exists(p.netns)]
    assert leaked_netns == []
    remaining = {s.id for s in await cri_client.runtime.list_pod_sandbox()}
    assert remaining.isdisjoint({p.id for p in seen})
