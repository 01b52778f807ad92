"""Local storage limits on the real testbed (upstream's localStorageEviction; no node pressure needed):

- a pod whose disk-backed emptyDir holds more than its sizeLimit is evicted with upstream's message;
- a pod whose (only) container writes more than its ephemeral-storage limit to its writable layer is evicted with
  upstream's message, which names the pod's total limit: upstream checks that before the container's own (the
  container's message: tests/differential/scenarios/evict-storage-limit-container.yaml);
- a pod within its limits keeps running.

Volume usage is measured once a minute per pod (upstream's volumeStatsAggPeriod) and containerd refreshes writable
layer usage on its own schedule, so an eviction may take a minute and a bit after the write.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import NS, one_container_pod
from tests.integration.evictionkit import pod_status, running_agent, wait_evicted

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


async def test_pods_over_their_local_storage_limits_are_evicted(
    testbed: Testbed, settings: Settings, admin: KubeClient
) -> None:
    suffix = uuid.uuid4().hex[:5]
    volume, layer, within = f"volume-{suffix}", f"layer-{suffix}", f"within-{suffix}"
    write = f"dd if=/dev/zero of={{}} bs=1M count={WRITE_MI} 2>/dev/null; sync; exec sleep 3600"
    async with running_agent(testbed, settings, admin, "agent-local-storage.log", (volume, layer, within)) as agent:
        await admin.create(paths.pods(NS), pod(volume, settings, write.format("/scratch/fill"), size_limit="20Mi"))
        await admin.create(paths.pods(NS), pod(layer, settings, write.format("/fill"), limit="20Mi"))
        await admin.create(paths.pods(NS), pod(within, settings, write.format("/scratch/fill"), size_limit="100Mi"))
        first, second = [
            evicted["status"]
            for evicted in await asyncio.gather(
                wait_evicted(admin, agent, volume, timeout=120), wait_evicted(admin, agent, layer, timeout=120)
            )
        ]
        assert first["message"] == 'Usage of EmptyDir volume "scratch" exceeds the limit "20Mi". '
        assert second["message"] == "Pod ephemeral local storage usage exceeds the total limit of containers 20Mi. "
        # Limit evictions are not node pressure: no DisruptionTarget condition, as upstream.
        for status in (first, second):
            assert status["phase"] == "Failed", status
            assert not [c for c in status.get("conditions") or () if c["type"] == "DisruptionTarget"], status
        assert (await pod_status(admin, within)).get("phase") == "Running"
        log = agent.log.read_text()
        assert "signal=emptydirfs.limit" in log and "signal=ephemeralpodfs.limit" in log, agent.tail()
