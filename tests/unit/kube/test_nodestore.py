"""The node's own Node for admission: the watched object, the status manager's copy before the first list or when
it is newer, and the list and watch it asks the apiserver for (a scripted apiserver)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from nodeagent.kube.informer import Added, Deleted, Modified, Synced
from nodeagent.kube.nodestore import NodeStore
from tests.unit.kube.scripted import Script, ScriptExhausted, line, obj, object_list, stream

NODES = "/api/v1/nodes"
NAME = "worker-1"


def node(rv: str, name: str = NAME, **labels: str) -> dict[str, Any]:
    found = obj(name, rv, kind="Node")
    found["metadata"]["labels"] = labels
    return found


class Fallback:
    """The status manager's last copy of the Node."""

    def __init__(self, value: dict[str, Any] | None) -> None:
        self.value = value

    def __call__(self) -> dict[str, Any] | None:
        return self.value


def test_before_the_first_list_the_status_managers_copy_answers() -> None:
    store = NodeStore(NAME, Fallback(node("10", color="blue")))
    assert not store.synced
    assert store.node() == node("10", color="blue")
    assert NodeStore(NAME, Fallback(None)).node() is None


def test_a_label_added_after_the_status_managers_copy_is_seen_at_once() -> None:
    fallback = Fallback(node("10"))
    store = NodeStore(NAME, fallback)
    store.apply(Synced((node("10"),), "10"))
    store.apply(Modified(node("12", **{"daemonset-color": "green"})))
    assert store.node() == node("12", **{"daemonset-color": "green"})
    # The status manager's own patch came back newer than the watch's last event: its copy is the newer view.
    fallback.value = node("13", **{"daemonset-color": "green", "patched": "yes"})
    assert store.node() == fallback.value
    # Then the watch catches up and moves past it.
    store.apply(Modified(node("14", **{"daemonset-color": "red"})))
    assert store.node() == node("14", **{"daemonset-color": "red"})


def test_other_nodes_are_ignored_and_a_deleted_node_falls_back() -> None:
    fallback = Fallback(node("5"))
    store = NodeStore(NAME, fallback)
    store.apply(Synced((node("7", name="worker-2", zone="b"), node("8", zone="a")), "8"))
    assert store.node() == node("8", zone="a")
    store.apply(Added(node("9", name="worker-2", zone="c")))
    store.apply(Modified(node("10", name="worker-2", zone="d")))
    assert store.node() == node("8", zone="a")
    store.apply(Deleted(node("11", name="worker-2")))
    assert store.node() == node("8", zone="a")
    store.apply(Deleted(node("12", zone="a")))
    assert store.node() == node("5")
    # A relist without the Node drops the watched one too.
    store.apply(Added(node("13", zone="e")))
    store.apply(Synced((), "14"))
    assert store.node() == node("5")


def test_an_unnumbered_resource_version_prefers_the_watch() -> None:
    store = NodeStore(NAME, Fallback(node("opaque-b", zone="old")))
    store.apply(Synced((node("opaque-a", zone="new"),), "x"))
    assert store.node() == node("opaque-a", zone="new")


async def test_run_lists_and_watches_only_the_own_node() -> None:
    selector = f"metadata.name={NAME}"

    def watch(request: httpx.Request) -> httpx.Response:
        params = dict(request.url.params)
        assert (params["watch"], params["resourceVersion"], params["fieldSelector"]) == ("true", "20", selector)
        return stream(line("MODIFIED", node("21", node_label="x")))

    script = (
        Script()
        .add("GET", NODES, object_list("20", node("20")), {"fieldSelector": selector, "limit": "500"})
        .add("GET", NODES, watch)
    )
    store = NodeStore(NAME, Fallback(None))
    async with script.client() as client:
        with pytest.raises(ScriptExhausted):
            await store.run(client)
    assert store.synced
    assert store.node() == node("21", node_label="x")
