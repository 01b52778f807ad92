"""CSI volume stats on the real testbed: a pod with a claim bound to a PV of the e2e suite's CSI mock driver
(nodeagent/testbed/csistack.py); the agent (`nodeagent run`) asks the driver for the volume's stats
(NodeGetVolumeStats, in the driver's own call log) instead of walking the published directory, and:

- /stats/summary, read through the apiserver's node proxy, lists the volume with the driver's numbers (the mock
  reports BYTES only: total = the volume's capacity, used and available 0; inodes 0) and the claim as pvcRef, and no
  volumeHealthStats (CSIVolumeHealth is off by default, as upstream);
- /metrics has kubelet_volume_stats_* for the claim (labels namespace and persistentvolumeclaim) with those numbers,
  and no health series.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import csistack
from nodeagent.testbed.csistack import NO_ATTACH
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import kubernetes_bin_dir
from tests.integration import csikit
from tests.integration.agentproc import NS, agent_config, clean_up, eventually, start_agent, stop_agent
from tests.integration.csikit import TIMEOUT, Bed, Obj

CAPACITY = 3 << 20  # what the mock reports as the volume's total bytes: its CreateVolume capacity
STATS = "/csi.v1.Node/NodeGetVolumeStats"
PREFIX = "csi-stats"


def _kubectl_raw(testbed: Testbed, path: str) -> str:
    done = subprocess.run(
        [
            str(kubernetes_bin_dir() / "kubectl"),
            "--kubeconfig",
            str(testbed.layout.admin_kubeconfig),
            "get",
            "--raw",
            path,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


@pytest_asyncio.fixture(loop_scope="session")
async def bed(testbed: Testbed, settings: Settings, admin: KubeClient, tmp_path: Path) -> AsyncIterator[Bed]:
    config = agent_config(testbed, tmp_path / "nodeagent.yaml")
    holder = Bed(
        testbed, start_agent(testbed, testbed.layout.logs / "agent-csi-volume-stats.log", config=config), config
    )
    try:
        yield await csikit.start_drivers(holder, admin, settings, NO_ATTACH)
    finally:
        made = [p["metadata"]["name"] for p in (await admin.list(paths.pods(NS)))["items"]]
        made = [name for name in made if name.startswith(PREFIX + "-")]
        for name in made:
            with contextlib.suppress(NotFound):
                await admin.delete(paths.pod(NS, name))

        async def pods_gone() -> bool:
            names = {p["metadata"]["name"] for p in (await admin.list(paths.pods(NS)))["items"]}
            return not names & set(made)

        with contextlib.suppress(AssertionError):  # the agent unpublishes before the pod goes
            await eventually(pods_gone, timeout=TIMEOUT, what="pods deleted", agent=holder.agent)
        stop_agent(holder.agent)
        await csikit.delete_objects(admin, PREFIX, [NO_ATTACH])
        csistack.stop_driver(testbed.layout, NO_ATTACH.name)
        await clean_up(testbed, settings)


@pytest.mark.asyncio(loop_scope="session")
async def test_claim_volume_stats_come_from_the_driver(
    bed: Bed, admin: KubeClient, settings: Settings, testbed: Testbed
) -> None:
    made = await csikit.claim_pod(
        admin, bed, settings, NO_ATTACH.name, PREFIX, capacity_bytes=CAPACITY, command=("sh", "-c", "sleep 3600")
    )
    claim = made.claim
    pod = await csikit.running(admin, bed.agent, made.pod["metadata"]["name"])
    uid = pod["metadata"]["uid"]

    async def summary_volume() -> Obj | None:
        body = json.loads(
            await asyncio.to_thread(_kubectl_raw, testbed, f"/api/v1/nodes/{settings.node_name}/proxy/stats/summary")
        )
        for entry in body["pods"]:
            if entry["podRef"]["uid"] == uid:
                found: list[Obj] = [v for v in entry.get("volume") or [] if v.get("name") == "data"]
                return found[0] if found else None
        return None

    got: Obj = await eventually(summary_volume, timeout=60, what="the volume in /stats/summary", agent=bed.agent)
    got.pop("time")
    assert got == {
        "availableBytes": 0,
        "capacityBytes": CAPACITY,
        "usedBytes": 0,
        "inodesFree": 0,
        "inodes": 0,
        "inodesUsed": 0,
        "name": "data",
        "pvcRef": {"name": claim, "namespace": NS},
    }
    # asked of the driver, for the published path (not walked)
    calls = bed.driver_calls(NO_ATTACH.name, made.volume_id, STATS)
    assert calls and calls[0]["Request"]["volume_path"].endswith(f"/pods/{uid}/volumes/kubernetes.io~csi/data/mount")
    assert not calls[0].get("Error")

    text = await asyncio.to_thread(_kubectl_raw, testbed, f"/api/v1/nodes/{settings.node_name}/proxy/metrics")
    samples = {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("kubelet_volume_stats_")
        for s in family.samples
        if s.labels == {"namespace": NS, "persistentvolumeclaim": claim}
    }
    assert samples == {
        "kubelet_volume_stats_capacity_bytes": float(CAPACITY),
        "kubelet_volume_stats_available_bytes": 0.0,
        "kubelet_volume_stats_used_bytes": 0.0,
        "kubelet_volume_stats_inodes": 0.0,
        "kubelet_volume_stats_inodes_free": 0.0,
        "kubelet_volume_stats_inodes_used": 0.0,
    }
