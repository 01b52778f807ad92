"""Local storage limits on the real testbed (upstream's localStorageEviction; no node pressure needed):

- a pod whose disk-backed emptyDir holds more than its sizeLimit is evicted with upstream's message;
- a pod whose container writes more than its ephemeral-storage limit to its writable layer is evicted with upstream's
  message;
- a pod within its limits keeps running.

Volume usage is measured once a minute per pod (upstream's volumeStatsAggPeriod) and containerd refreshes writable
layer usage on its own schedule, so an eviction may take a minute and a bit after the write.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import (
    NS,
    Agent,
    clean_up,
    eventually,
    node_ready,
    one_container_pod,
    start_agent,
    stop_agent,
)

Obj = dict[str, Any]
WRITE_MI = 40  # twice the limits below


def pod(name: str, settings: Settings, script: str, *, limit: str | None = None, size_limit: str | None = None) -> Obj:
    container: Obj = {
        "image": configs.busybox_image(settings),
        "command": ["sh", "-c", script],
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
    }
    if limit is not None:
        container["resources"] = {"limits": {"ephemeral-storage": limit}}
    empty_dir: Obj = {} if size_limit is None else {"sizeLimit": size_limit}
    return one_container_pod(
        name, container, {}, terminationGracePeriodSeconds=5, volumes=[{"name": "scratch", "emptyDir": empty_dir}]
    )


async def _status(admin: KubeClient, name: str) -> Obj:
    found: Obj = (await admin.get(paths.pod(NS, name))).get("status") or {}
    return found


async def test_pods_over_their_local_storage_limits_are_evicted(
    testbed: Testbed, settings: Settings, admin: KubeClient
) -> None:
    suffix = uuid.uuid4().hex[:5]
    volume, layer, within = f"volume-{suffix}", f"layer-{suffix}", f"within-{suffix}"
    write = f"dd if=/dev/zero of={{}} bs=1M count={WRITE_MI} 2>/dev/null; sync; exec sleep 3600"
    agent: Agent = start_agent(testbed, testbed.layout.logs / "agent-local-storage.log")
    try:
        await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=agent)
        await admin.create(paths.pods(NS), pod(volume, settings, write.format("/scratch/fill"), size_limit="20Mi"))
        await admin.create(paths.pods(NS), pod(layer, settings, write.format("/fill"), limit="20Mi"))
        await admin.create(paths.pods(NS), pod(within, settings, write.format("/scratch/fill"), size_limit="100Mi"))

        async def evicted(name: str) -> Obj | None:
            status = await _status(admin, name)
            return status if status.get("reason") == "Evicted" and status.get("phase") == "Failed" else None

        first, second = await asyncio.gather(
            eventually(lambda: evicted(volume), timeout=120, what=f"{volume} is evicted", agent=agent),
            eventually(lambda: evicted(layer), timeout=120, what=f"{layer} is evicted", agent=agent),
        )
        assert first["message"] == 'Usage of EmptyDir volume "scratch" exceeds the limit "20Mi". '
        assert second["message"] == 'Container main exceeded its local ephemeral storage limit "20Mi". '
        # Limit evictions are not node pressure: no DisruptionTarget condition, as upstream.
        for status in (first, second):
            assert not [c for c in status.get("conditions") or () if c["type"] == "DisruptionTarget"], status
        assert (await _status(admin, within)).get("phase") == "Running"
        log = agent.log.read_text()
        assert "signal=emptydirfs.limit" in log and "signal=ephemeralcontainerfs.limit" in log, agent.tail()
    finally:
        stop_agent(agent)
        for name in (volume, layer, within):
            with contextlib.suppress(NotFound):
                await admin.delete(paths.pod(NS, name), grace_period_seconds=0)
        await clean_up(testbed, settings)
