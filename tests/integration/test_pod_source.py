"""The apiserver pod source, with the node's own credential: it sees exactly the pods bound to this node."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.podconfig import Operation, PodConfig, PodUpdate
from nodeagent.sources.apiserver import SOURCE, run_apiserver_source
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed


def pod_manifest(name: str, node: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": False,
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }


async def next_update(config: PodConfig, timeout: float = 20.0) -> PodUpdate:
    return await asyncio.wait_for(config.updates.get(), timeout)


async def wait_for(config: PodConfig, op: Operation, name: str) -> PodUpdate:
    while True:
        update = await next_update(config)
        if update.op is op and any(p["metadata"]["name"] == name for p in update.pods):
            return update


async def test_pods_bound_to_the_node_flow_as_typed_updates(
    testbed: Testbed, settings: Settings, admin: KubeClient
) -> None:
    config = PodConfig([SOURCE])
    suffix = uuid.uuid4().hex[:6]
    mine, other = f"mine-{suffix}", f"other-{suffix}"
    async with KubeClient.from_kubeconfig(testbed.layout.node_kubeconfig) as node_client:
        source = asyncio.create_task(run_apiserver_source(node_client, settings.node_name, config.push))
        try:
            first = await next_update(config)
            assert (first.op, first.source) == (Operation.ADD, SOURCE)
            assert config.sources_ready()

            await admin.create(paths.pods("default"), pod_manifest(other, "some-other-node"))
            await admin.create(paths.pods("default"), pod_manifest(mine, settings.node_name))
            added = await wait_for(config, Operation.ADD, mine)
            assert [p["metadata"]["name"] for p in added.pods] == [mine]
            assert added.pods[0]["metadata"]["annotations"]["kubernetes.io/config.source"] == "api"

            # A graceful delete sets deletionTimestamp: the pod stays, as a DELETE for its worker to terminate.
            await admin.delete(paths.pod("default", mine), grace_period_seconds=30)
            deleted = await wait_for(config, Operation.DELETE, mine)
            assert deleted.pods[0]["metadata"]["deletionTimestamp"]

            # The final delete (what the agent does once the pod is down) removes it.
            await admin.delete(paths.pod("default", mine), grace_period_seconds=0)
            await wait_for(config, Operation.REMOVE, mine)
            assert all(p["metadata"]["name"] != other for p in config.pods())
        finally:
            source.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await source
            with contextlib.suppress(NotFound):
                await admin.delete(paths.pod("default", other), grace_period_seconds=0)
