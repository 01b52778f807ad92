"""The fleet's shared informers (`SharedInformers`): with --kubeconfig a fleet of N nodes lists and watches the
Services and the RuntimeClasses once, with its own client, and hands every node the same caches; with only
--bootstrap-kubeconfig it has no credential of its own and each node keeps its own informers. The caches' readers
(every node) see the first list (the Service "synced" gate) and a Service added later.

The apiserver is a fake behind httpx's transport seam: a list answers the objects it holds, a watch stays open and
streams what the test puts in its queue. The nodes are stand-ins for `run_node` (the fleet's wiring is what is under
test here; the agent reading `Emulation.informers` is checked on the testbed, tests/integration/test_fleet.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from cri.fake import Behaviour
from nodeagent.agent import SharedInformers
from nodeagent.fleet import fleet as fleet_module
from nodeagent.fleet.plan import FleetOptions
from nodeagent.kube.client import KubeClient
from nodeagent.kube.kubeconfig import ClusterCredentials
from nodeagent.runtimeclass import RuntimeClassNotFound
from tests.unit.kube.scripted import SERVER

SERVICES = "/api/v1/services"
RUNTIMECLASSES = "/apis/node.k8s.io/v1/runtimeclasses"


def service(name: str, rv: str) -> dict[str, Any]:
    return {"kind": "Service", "metadata": {"name": name, "namespace": "default", "resourceVersion": rv}}


class Apiserver:
    """Services and RuntimeClasses: lists from `listed`, watches open until the test ends, fed from `events`."""

    def __init__(self) -> None:
        self.listed: dict[str, list[dict[str, Any]]] = {SERVICES: [], RUNTIMECLASSES: []}
        self.events: dict[str, asyncio.Queue[dict[str, Any]]] = {
            SERVICES: asyncio.Queue(),
            RUNTIMECLASSES: asyncio.Queue(),
        }
        self.requests: list[tuple[str, bool]] = []  # (path, watch)
        self.watching: dict[str, asyncio.Event] = {SERVICES: asyncio.Event(), RUNTIMECLASSES: asyncio.Event()}

    def watches(self, path: str) -> int:
        return sum(1 for p, watch in self.requests if p == path and watch)

    def lists(self, path: str) -> int:
        return sum(1 for p, watch in self.requests if p == path and not watch)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        watch = request.url.params.get("watch") == "true"
        self.requests.append((path, watch))
        if path not in self.listed:
            return httpx.Response(404, json={"kind": "Status", "code": 404, "reason": "NotFound"})
        if not watch:
            body = {"kind": "List", "metadata": {"resourceVersion": "100"}, "items": self.listed[path]}
            return httpx.Response(200, json=body)
        queue = self.events[path]
        self.watching[path].set()

        async def stream() -> AsyncIterator[bytes]:
            while True:
                event = await queue.get()
                yield json.dumps(event).encode() + b"\n"

        return httpx.Response(200, content=stream())

    def client(self) -> KubeClient:
        return KubeClient(ClusterCredentials(server=SERVER), transport=httpx.MockTransport(self))


async def until(check: Callable[[], bool], what: str) -> None:
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"never: {what}")


async def test_every_reader_waits_for_the_first_list_then_sees_a_service_added_later() -> None:
    api = Apiserver()
    api.listed[SERVICES] = [service("kubernetes", "10")]
    api.listed[RUNTIMECLASSES] = [{"kind": "RuntimeClass", "metadata": {"name": "kata"}, "handler": "kata-qemu"}]
    informers = SharedInformers()
    # Two nodes' views are the same caches: before the first list, neither has synced (their containers wait).
    nodes = [informers, informers]
    assert not any(n.services.synced for n in nodes)
    with pytest.raises(RuntimeClassNotFound):
        informers.runtime_classes.lookup_runtime_handler("kata")
    async with api.client() as client:
        task = asyncio.create_task(informers.run(client))
        try:
            await until(lambda: api.watching[SERVICES].is_set() and api.watching[RUNTIMECLASSES].is_set(), "watching")
            assert all(n.services.synced for n in nodes)
            assert [s["metadata"]["name"] for s in informers.services.list()] == ["kubernetes"]
            assert informers.runtime_classes.lookup_runtime_handler("kata") == "kata-qemu"
            await api.events[SERVICES].put({"type": "ADDED", "object": service("web", "101")})
            await until(lambda: len(informers.services.list()) == 2, "the added Service seen")
            assert sorted(s["metadata"]["name"] for s in informers.services.list()) == ["kubernetes", "web"]
            assert (api.lists(SERVICES), api.watches(SERVICES)) == (1, 1)
            assert (api.lists(RUNTIMECLASSES), api.watches(RUNTIMECLASSES)) == (1, 1)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


Started = list[tuple[str, SharedInformers | None]]


def fake_nodes(monkeypatch: pytest.MonkeyPatch) -> Started:
    """`run_node` replaced: each node records the informers the fleet handed it and runs until the fleet stops."""
    started: Started = []

    async def run_node(plan: Any, options: Any, config: Any, behaviour: Any, stop: asyncio.Event, **parts: Any) -> None:
        started.append((plan.name, parts.get("informers")))
        await stop.wait()

    monkeypatch.setattr(fleet_module, "run_node", run_node)
    return started


async def run_fleet_until(options: FleetOptions, ready: Callable[[], bool]) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(fleet_module.run_fleet(options, Behaviour(), stop))
    try:
        await until(ready, "the fleet up")
    finally:
        stop.set()
        result = await task
    assert not result.failed


async def test_a_fleet_of_n_nodes_holds_one_service_watch_and_one_runtimeclass_watch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    api = Apiserver()
    clients: list[Path] = []

    def from_kubeconfig(path: Path, **_: Any) -> KubeClient:
        clients.append(path)
        return api.client()

    monkeypatch.setattr(KubeClient, "from_kubeconfig", from_kubeconfig)
    started = fake_nodes(monkeypatch)
    nodes = 5
    options = FleetOptions(
        nodes=nodes, prefix="sh", directory=tmp_path, kubeconfig=tmp_path / "admin.conf", stagger=0.0
    )

    def up() -> bool:
        return len(started) == nodes and api.watching[SERVICES].is_set() and api.watching[RUNTIMECLASSES].is_set()

    await run_fleet_until(options, up)
    # One client, the fleet's (its --kubeconfig), and one list+watch of each for all the nodes, not one per node.
    assert clients == [tmp_path / "admin.conf"]
    assert (api.lists(SERVICES), api.watches(SERVICES)) == (1, 1)
    assert (api.lists(RUNTIMECLASSES), api.watches(RUNTIMECLASSES)) == (1, 1)
    shared = {id(informers) for _, informers in started}
    assert len(shared) == 1 and started[0][1] is not None
    assert sorted(name for name, _ in started) == [f"sh-{i}" for i in range(nodes)]


async def test_with_only_bootstrap_credentials_each_node_keeps_its_own_informers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    made: list[Path] = []

    def from_kubeconfig(path: Path, **_: Any) -> KubeClient:
        made.append(path)
        raise AssertionError("the fleet has no credential of its own")

    monkeypatch.setattr(KubeClient, "from_kubeconfig", from_kubeconfig)
    started = fake_nodes(monkeypatch)
    options = FleetOptions(
        nodes=3, prefix="bt", directory=tmp_path, bootstrap_kubeconfig=tmp_path / "bootstrap.conf", stagger=0.0
    )
    await run_fleet_until(options, lambda: len(started) == 3)
    assert made == []
    assert [informers for _, informers in started] == [None, None, None]


async def test_a_shared_watch_that_ends_is_logged_when_it_ends(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api = Apiserver()
    monkeypatch.setattr(KubeClient, "from_kubeconfig", lambda path, **_: api.client())

    async def broken(self: SharedInformers, client: KubeClient) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(SharedInformers, "run", broken)
    started = fake_nodes(monkeypatch)

    def logged() -> bool:
        return "fleet shared watch ended name=fleet-informers error=RuntimeError('a bug')" in caplog.text

    options = FleetOptions(nodes=2, prefix="br", directory=tmp_path, kubeconfig=tmp_path / "admin.conf", stagger=0.0)
    await run_fleet_until(options, lambda: len(started) == 2 and logged())
