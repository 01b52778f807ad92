"""Contract of the kube client against the testbed's real apiserver: verbs, error mapping, watch, reflector, and
what the node credential may do under the Node authorizer and NodeRestriction."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from nodeagent.kube import (
    AlreadyExists,
    ApiError,
    Conflict,
    Forbidden,
    Invalid,
    KubeClient,
    NotFound,
    ReflectorEvent,
    Unauthorized,
    list_and_watch,
    paths,
)
from nodeagent.kube.informer import Added, Deleted, Modified, Synced
from nodeagent.testbed.kubeconfig import write_kubeconfig
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.pki import CertificateAuthority

if TYPE_CHECKING:
    # Not imported at run time: pytest would try to collect a class named Test* found in the module.
    from nodeagent.testbed.testbed import Testbed

pytestmark = pytest.mark.integration

NS = "default"
DEADLINE = 60.0


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _configmap(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}},
        "data": data,
    }


def _names(objects: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objects)


async def test_configmap_verbs_and_their_errors(testbed: Testbed) -> None:
    name = _name("kc-verbs")
    path = paths.configmap(NS, name)
    async with asyncio.timeout(DEADLINE), KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin:
        created = await admin.create(paths.configmaps(NS), _configmap(name, a="1"))
        assert created["metadata"]["uid"]
        assert created["data"] == {"a": "1"}
        with pytest.raises(AlreadyExists):
            await admin.create(paths.configmaps(NS), _configmap(name))

        assert (await admin.get(path))["data"] == {"a": "1"}
        patched = await admin.patch(path, {"data": {"b": "2"}})
        assert patched["data"] == {"a": "1", "b": "2"}
        patched = await admin.patch(path, {"data": {"a": None}}, patch_type="merge")
        assert patched["data"] == {"b": "2"}
        patched = await admin.patch(path, [{"op": "add", "path": "/data/c", "value": "3"}], patch_type="json")
        assert patched["data"] == {"b": "2", "c": "3"}
        applied = await admin.patch(
            path, _configmap(name, d="4"), patch_type="apply", field_manager="nodeagent-test", force=True
        )
        assert applied["data"]["d"] == "4"
        managers = {m["manager"] for m in applied["metadata"]["managedFields"]}
        assert "nodeagent-test" in managers

        stale = {**created, "data": {"stale": "yes"}}
        with pytest.raises(Conflict) as conflict:
            await admin.replace(path, stale)
        assert not isinstance(conflict.value, AlreadyExists)
        current = await admin.get(path)
        replaced = await admin.replace(path, {**current, "data": {"e": "5"}})
        assert replaced["data"] == {"e": "5"}

        with pytest.raises(Conflict, match="UID in the precondition"):
            await admin.delete(path, preconditions_uid=str(uuid.uuid4()))
        await admin.delete(path, preconditions_uid=created["metadata"]["uid"], grace_period_seconds=0)
        with pytest.raises(NotFound) as missing:
            await admin.get(path)
        assert missing.value.status_code == 404
        assert f'configmaps "{name}" not found' in missing.value.message

        with pytest.raises(Invalid) as invalid:
            await admin.create(paths.configmaps(NS), _configmap("Not_A_DNS_Name"))
        assert invalid.value.status_code == 422


async def test_list_pages_and_watch_replays_changes_after_the_list(testbed: Testbed) -> None:
    run = _name("run")
    labels = {"nodeagent-test": run}
    selector = f"nodeagent-test={run}"
    async with asyncio.timeout(DEADLINE), KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin:
        names = [f"{run}-{i}" for i in range(5)]
        for name in names:
            await admin.create(paths.configmaps(NS), _configmap(name, labels))
        try:
            listed = await admin.list(paths.configmaps(NS), label_selector=selector, limit=2)
            assert _names(listed["items"]) == sorted(names)
            assert "continue" not in listed["metadata"]
            rv = listed["metadata"]["resourceVersion"]

            extra = f"{run}-extra"
            await admin.create(paths.configmaps(NS), _configmap(extra, labels))
            await admin.patch(paths.configmap(NS, extra), {"data": {"x": "1"}})
            await admin.delete(paths.configmap(NS, extra))

            seen: list[tuple[str, str]] = []
            events = admin.watch(paths.configmaps(NS), resource_version=rv, label_selector=selector, timeout_seconds=30)
            async with contextlib.aclosing(events):
                async for event in events:
                    if event.type == "BOOKMARK":
                        continue
                    seen.append((event.type, event.object["metadata"]["name"]))
                    if event.type == "DELETED":
                        break
            assert seen == [("ADDED", extra), ("MODIFIED", extra), ("DELETED", extra)]
        finally:
            for name in names:
                with contextlib.suppress(NotFound):
                    await admin.delete(paths.configmap(NS, name))


async def test_reflector_delivers_a_snapshot_then_changes(testbed: Testbed) -> None:
    run = _name("refl")
    labels = {"nodeagent-test": run}
    first, second = f"{run}-first", f"{run}-second"
    got: asyncio.Queue[ReflectorEvent] = asyncio.Queue()

    async def on_event(event: ReflectorEvent) -> None:
        got.put_nowait(event)

    async def next_change() -> ReflectorEvent:
        return await asyncio.wait_for(got.get(), timeout=30)

    async with asyncio.timeout(DEADLINE), KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin:
        await admin.create(paths.configmaps(NS), _configmap(first, labels))
        reflector = asyncio.create_task(
            list_and_watch(
                admin, paths.configmaps(NS), on_event=on_event, label_selector=f"nodeagent-test={run}", page_size=1
            ),
            name="test-reflector",
        )
        try:
            synced = await next_change()
            assert isinstance(synced, Synced)
            assert _names(synced.objects) == [first]
            assert synced.resource_version

            await admin.create(paths.configmaps(NS), _configmap(second, labels))
            added = await next_change()
            assert isinstance(added, Added)
            assert added.object["metadata"]["name"] == second

            await admin.patch(paths.configmap(NS, second), {"data": {"k": "v"}})
            modified = await next_change()
            assert isinstance(modified, Modified)
            assert modified.object["data"] == {"k": "v"}

            await admin.delete(paths.configmap(NS, first))
            deleted = await next_change()
            assert isinstance(deleted, Deleted)
            assert deleted.object["metadata"]["name"] == first
        finally:
            reflector.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reflector
            for name in (first, second):
                with contextlib.suppress(NotFound):
                    await admin.delete(paths.configmap(NS, name))


async def test_node_credential_registers_its_own_node_only(testbed: Testbed, settings: Settings) -> None:
    own = settings.node_name
    other = _name("not-this-node")
    node_config = testbed.layout.node_kubeconfig
    async with (
        asyncio.timeout(DEADLINE),
        KubeClient.from_kubeconfig(node_config) as node,
        KubeClient.from_kubeconfig(testbed.layout.admin_kubeconfig) as admin,
    ):
        created = False
        try:
            try:
                registered = await node.create(
                    paths.nodes(), {"apiVersion": "v1", "kind": "Node", "metadata": {"name": own}}
                )
                created = True
                assert registered["metadata"]["name"] == own
            except AlreadyExists:
                pass  # registered by another test of this session: the create was still authorized
            assert (await node.get(paths.node(own)))["metadata"]["name"] == own

            with pytest.raises(Forbidden) as forbidden:
                await node.create(paths.nodes(), {"apiVersion": "v1", "kind": "Node", "metadata": {"name": other}})
            assert forbidden.value.status_code == 403
            with pytest.raises(Forbidden):
                await node.list("/api/v1/secrets")
        finally:
            if created:
                # Leave the node unregistered, as the other tests of the session expect to find it.
                await admin.delete(paths.node(own))
                with contextlib.suppress(NotFound):
                    while True:
                        await admin.get(paths.node(own))
                        await asyncio.sleep(0.2)


async def test_a_client_certificate_of_another_ca_is_unauthorized(testbed: Testbed, tmp_path: Path) -> None:
    stranger = CertificateAuthority.create(tmp_path / "stranger", "stranger-ca")
    pair = stranger.issue(tmp_path / "stranger", "who", common_name="kubernetes-admin", client=True)
    config = tmp_path / "stranger.kubeconfig"
    write_kubeconfig(
        config, server=testbed.settings.apiserver_url, ca=testbed.layout.pki / "ca.crt", client=pair, user="x"
    )
    async with asyncio.timeout(DEADLINE), KubeClient.from_kubeconfig(config) as client:
        with pytest.raises(ApiError) as caught:
            await client.get(paths.namespace(NS))
    assert isinstance(caught.value, Unauthorized), repr(caught.value)
