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
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs, csistack
from nodeagent.testbed.csistack import NO_ATTACH, DriverStack
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import kubernetes_bin_dir
from tests.integration.agentproc import (
    NS,
    Agent,
    agent_config,
    clean_up,
    eventually,
    node_ready,
    running_id,
    start_agent,
    stop_agent,
)

Obj = dict[str, Any]
CAPACITY = 3 << 20  # what the mock reports as the volume's total bytes: its CreateVolume capacity
STATS = "/csi.v1.Node/NodeGetVolumeStats"
TIMEOUT = 90.0


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


class Made:
    """What the test made, removed at the end even when it fails."""

    def __init__(self) -> None:
        self.pods: list[str] = []
        self.claims: list[str] = []
        self.pvs: list[str] = []
        self.stack: DriverStack | None = None


@pytest_asyncio.fixture(loop_scope="session")
async def bed(
    testbed: Testbed, settings: Settings, admin: KubeClient, tmp_path: Path
) -> AsyncIterator[tuple[Agent, Made]]:
    config = agent_config(testbed, tmp_path / "nodeagent.yaml")
    agent = start_agent(testbed, testbed.layout.logs / "agent-csi-volume-stats.log", config=config)
    made = Made()
    try:
        await eventually(lambda: node_ready(admin, settings.node_name), timeout=60, what="node Ready", agent=agent)
        made.stack = await csistack.start_driver(testbed.layout, NO_ATTACH)
        await csistack.delete_csidriver(admin, NO_ATTACH.name)
        await csistack.create_csidriver(admin, NO_ATTACH)
        yield agent, made
    finally:
        for name in made.pods:
            with contextlib.suppress(NotFound):
                await admin.delete(paths.pod(NS, name))

        async def pods_gone() -> bool:
            names = {p["metadata"]["name"] for p in (await admin.list(paths.pods(NS)))["items"]}
            return not names & set(made.pods)

        with contextlib.suppress(AssertionError):  # the agent unpublishes before the pod goes
            await eventually(pods_gone, timeout=TIMEOUT, what="pods deleted", agent=agent)
        stop_agent(agent)
        for claim in made.claims:
            with contextlib.suppress(NotFound):
                await admin.delete(paths.api_path("persistentvolumeclaims", namespace=NS, name=claim))
        for pv in made.pvs:
            with contextlib.suppress(NotFound):
                await admin.delete(paths.api_path("persistentvolumes", name=pv))
        await csistack.delete_csidriver(admin, NO_ATTACH.name)
        csistack.stop_driver(testbed.layout, NO_ATTACH.name)
        await clean_up(testbed, settings)


@pytest.mark.asyncio(loop_scope="session")
async def test_claim_volume_stats_come_from_the_driver(
    bed: tuple[Agent, Made], admin: KubeClient, settings: Settings, testbed: Testbed
) -> None:
    agent, made = bed
    suffix = uuid.uuid4().hex[:5]
    pv_name, claim, pod_name = f"csi-stats-pv-{suffix}", f"csi-stats-claim-{suffix}", f"csi-stats-pod-{suffix}"
    stack = made.stack
    assert stack is not None
    made.pvs.append(pv_name)
    volume = await csistack.provision(admin, stack, pv_name, capacity_bytes=CAPACITY)
    made.claims.append(claim)
    await admin.create(
        paths.api_path("persistentvolumeclaims", namespace=NS),
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": NS},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "volumeName": pv_name,
                "resources": {"requests": {"storage": "1Mi"}},
            },
        },
    )
    made.pods.append(pod_name)
    await admin.create(
        paths.pods(NS),
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": NS},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": "main",
                        "image": configs.busybox_image(settings),
                        "command": ["sh", "-c", "sleep 3600"],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    }
                ],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
            },
        },
    )

    async def running() -> Obj | None:
        pod: Obj = await admin.get(paths.pod(NS, pod_name))
        return pod if running_id(pod, "main") else None

    pod = await eventually(running, timeout=TIMEOUT, what=f"{pod_name} running", agent=agent)
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

    got: Obj = await eventually(summary_volume, timeout=60, what="the volume in /stats/summary", agent=agent)
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
    calls = [
        c
        for c in csistack.driver_calls(testbed.layout, NO_ATTACH.name)
        if c.get("Method") == STATS and (c.get("Request") or {}).get("volume_id") == volume.volume_id
    ]
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
