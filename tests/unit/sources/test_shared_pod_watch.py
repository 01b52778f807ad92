"""The fleet's shared pod watch (`SharedPodSource`) over a scripted apiserver: one list+watch of every bound pod,
fanned out to each node's pod source as if each had its own list+watch (SET / ADD / UPDATE / REMOVE per node)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nodeagent.kube.informer import Added, Deleted, Synced
from nodeagent.podconfig import PodConfig
from nodeagent.podconfig.storage import Operation, SourceUpdate, pod_uid
from nodeagent.sources.apiserver import SOURCE, SharedPodSource, SharedPodWatchStopped
from tests.unit.kube.scripted import Script, ScriptExhausted, expired, line, object_list, stream

PODS = "/api/v1/pods"
NODES = ("fleet-0", "fleet-1")


def pod(name: str, node: str, uid: str | None = None, rv: str = "1") -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}", "resourceVersion": rv},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "pause"}]},
    }


def update(op: Operation, *pods: dict[str, Any]) -> SourceUpdate:
    return SourceUpdate(SOURCE, op, tuple(pods))


class Sinks:
    """Each node's pod source, recording what it pushed."""

    def __init__(self, shared: SharedPodSource) -> None:
        self.shared = shared
        self.got: dict[str, list[SourceUpdate]] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}

    async def start(self, node: str) -> None:
        self.got[node] = []
        self.tasks[node] = asyncio.create_task(self.shared.source(node, self.got[node].append))
        await asyncio.sleep(0)  # registered

    async def stop(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)


async def run_script(shared: SharedPodSource, script: Script) -> None:
    async with script.client() as client:
        with pytest.raises(ScriptExhausted):
            await shared.run(client)
    assert not script.steps, "the watch stopped before the script's end"


async def test_one_list_and_watch_fanned_out_by_node_and_other_nodes_dropped() -> None:
    shared = SharedPodSource(NODES)
    sinks = Sinks(shared)
    await sinks.start("fleet-0")
    await sinks.start("fleet-1")
    a, b, elsewhere = pod("a", "fleet-0"), pod("b", "fleet-1"), pod("x", "real-node")
    c, a2 = pod("c", "fleet-1", rv="101"), pod("a", "fleet-0", rv="102")
    script = (
        Script()
        .add("GET", PODS, object_list("100", a, elsewhere, b))
        .add(
            "GET",
            PODS,
            stream(line("ADDED", c), line("ADDED", pod("y", "real-node")), line("MODIFIED", a2)),
        )
    )
    await run_script(shared, script)
    assert sinks.got["fleet-0"] == [update(Operation.SET, a), update(Operation.UPDATE, a2)]
    assert sinks.got["fleet-1"] == [update(Operation.SET, b), update(Operation.ADD, c)]
    assert shared.dropped == 1
    # One list and one watch for every node, of every pod bound to a node.
    assert [r.url.params.get("fieldSelector") for r in script.requests] == ["spec.nodeName!="] * 3
    assert [r.url.params.get("watch") for r in script.requests] == [None, "true", "true"]
    await sinks.stop()


async def test_sources_ready_only_once_the_shared_list_arrived_and_late_nodes_get_their_set() -> None:
    shared = SharedPodSource(NODES)
    config = PodConfig([SOURCE])
    task = asyncio.create_task(shared.source("fleet-0", config.push))
    await asyncio.sleep(0)
    assert not config.sources_ready()
    await shared.on_event(Synced((pod("b", "fleet-1"),), "100"))
    # fleet-0 has no pod: its SET is empty, but it came, as its own list would have.
    assert config.sources_ready()
    late: list[SourceUpdate] = []
    task_late = asyncio.create_task(shared.source("fleet-1", late.append))
    await asyncio.sleep(0)
    assert late == [update(Operation.SET, pod("b", "fleet-1"))]
    for t in (task, task_late):
        t.cancel()
    await asyncio.gather(task, task_late, return_exceptions=True)


async def test_gone_relists_and_every_node_gets_the_new_set() -> None:
    shared = SharedPodSource(NODES)
    sinks = Sinks(shared)
    await sinks.start("fleet-0")
    a, b, c = pod("a", "fleet-0"), pod("b", "fleet-0"), pod("c", "fleet-0", rv="400")
    script = (
        Script()
        .add("GET", PODS, object_list("100", a, b))
        .add("GET", PODS, stream(expired()))
        # b was deleted and c created while the watch was down: the relist's SET tells the node.
        .add("GET", PODS, object_list("500", a, c))
        .add("GET", PODS, stream(line("DELETED", c)))
    )
    await run_script(shared, script)
    assert sinks.got["fleet-0"] == [
        update(Operation.SET, a, b),
        update(Operation.SET, a, c),
        update(Operation.REMOVE, c),
    ]
    await sinks.stop()


async def test_delete_and_recreate_with_the_same_name_on_another_node() -> None:
    shared = SharedPodSource(NODES)
    config = PodConfig([SOURCE])
    task = asyncio.create_task(shared.source("fleet-0", config.push))
    await asyncio.sleep(0)
    old, new = pod("a", "fleet-0", uid="uid-old"), pod("a", "fleet-1", uid="uid-new")
    await shared.on_event(Synced((old,), "100"))
    assert [pod_uid(p) for p in config.pods()] == ["uid-old"]
    await shared.on_event(Deleted(old))
    await shared.on_event(Added(new))
    assert config.pods() == []  # removed from fleet-0; the new pod is fleet-1's
    late: list[SourceUpdate] = []
    task_late = asyncio.create_task(shared.source("fleet-1", late.append))
    await asyncio.sleep(0)
    assert late == [update(Operation.SET, new)]
    # And the same name back on fleet-0: a new pod there.
    again = pod("a", "fleet-0", uid="uid-again")
    await shared.on_event(Deleted(new))
    await shared.on_event(Added(again))
    assert [pod_uid(p) for p in config.pods()] == ["uid-again"]
    assert late[-1] == update(Operation.REMOVE, new)
    for t in (task, task_late):
        t.cancel()
    await asyncio.gather(task, task_late, return_exceptions=True)
    # What is kept for each node forgot the deleted pods: a node starting now gets only what is bound to it.
    for node, want in (("fleet-0", (again,)), ("fleet-1", ())):
        restarted: list[SourceUpdate] = []
        again_task = asyncio.create_task(shared.source(node, restarted.append))
        await asyncio.sleep(0)
        assert restarted == [update(Operation.SET, *want)]
        again_task.cancel()
        await asyncio.gather(again_task, return_exceptions=True)


async def test_the_nodes_sources_end_when_the_shared_watch_does() -> None:
    shared = SharedPodSource(NODES)
    sinks = Sinks(shared)
    await sinks.start("fleet-0")
    await run_script(shared, Script())
    with pytest.raises(SharedPodWatchStopped):
        await sinks.tasks["fleet-0"]


async def test_a_node_not_of_the_watch_or_twice_is_refused() -> None:
    shared = SharedPodSource(NODES)
    with pytest.raises(ValueError, match="not one of"):
        await shared.source("other", lambda _: None)
    sinks = Sinks(shared)
    await sinks.start("fleet-0")
    with pytest.raises(ValueError, match="already has"):
        await shared.source("fleet-0", lambda _: None)
    await sinks.stop()
