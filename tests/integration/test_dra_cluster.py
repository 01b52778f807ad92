"""Upstream's DRA specs that need two nodes, on a 3-node `cluster up --preset devices` (issue 32), end to end.

The devices preset's 44 specs run on the one-node testbed, where the 2 `on multiple nodes ...` ones skip themselves
("2 ready nodes required, only have 1": kubeadm's control-plane node is tainted, so its workers are the nodes they
count). Here the cluster is set up as upstream's DRA cluster (test/e2e/dra/kind.yaml: resource.k8s.io v1beta1 and
v1beta2 served), and:
- each node's /var/run/cdi, where the DRA proxy pod writes its CDI specs, is the node's own directory, not the
  host's nor another node's;
- `nodeagent conformance --preset devices --cluster DIR`, focused on the two, passes both, none skipped;
- `cluster down` leaves nothing.

Marker `cluster` (as test_cluster_network.py): kubeadm and e2e.test, minutes on 2 cores; needs the e2e suite built
(`nodeagent conformance` builds it the first time).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

import nodeagent
from nodeagent.cluster.cluster import Cluster, ClusterError, wait_nodes_ready
from nodeagent.cluster.node import MOUNTNS
from nodeagent.conformance import junit
from nodeagent.conformance.junit import Outcome
from nodeagent.conformance.presets import DEVICES
from nodeagent.testbed import processes
from tests.integration.clusterkit import temporary_cluster
from tests.integration.test_kubeadm_cluster import KUBECTL, kubectl, leftovers, pod_netns

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

MULTI_NODE_FOCUS = r"kubelet \[Feature:DynamicResourceAllocation\].*on multiple nodes"


@pytest_asyncio.fixture
async def cluster() -> AsyncIterator[Cluster]:
    async with temporary_cluster("nodeagent-dra-cluster-") as made:
        yield made


def _in_node(cluster: Cluster, index: int, *argv: str) -> str:
    holder = processes.load(cluster.node_root(index) / "pids", MOUNTNS)
    assert holder is not None and holder.alive()
    return subprocess.run(
        ["nsenter", "-t", str(holder.pid), "-m", "--", *argv], capture_output=True, text=True, check=True, timeout=30
    ).stdout


def _multi_node_specs(cluster_dir: Path, run_dir: Path) -> subprocess.CompletedProcess[str]:
    """`nodeagent conformance --preset devices --cluster DIR` on the two specs, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(Path(nodeagent.__file__).resolve().parent.parent)}
    return subprocess.run(
        [sys.executable, "-m", "nodeagent", "conformance", "--preset", "devices", "--cluster", str(cluster_dir),
         "--focus", MULTI_NODE_FOCUS, "--dir", str(run_dir)],
        env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip


async def test_the_multi_node_dra_specs_pass_on_a_devices_cluster(cluster: Cluster, tmp_path: Path) -> None:
    started = time.monotonic()
    try:
        await cluster.up(3, runtime_config=DEVICES.runtime_config)
    except ClusterError as exc:
        pytest.fail(f"cluster up: {exc}")
    state = cluster.state()
    await wait_nodes_ready(KUBECTL, cluster.admin_kubeconfig, [n.name for n in state.nodes], timeout=180)
    served = kubectl(cluster, "api-versions").split()
    assert {"resource.k8s.io/v1", "resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2"} <= set(served)

    # A file written to /var/run/cdi on worker 1 is in its own directory only.
    name = f"probe-{uuid.uuid4().hex[:8]}.json"
    _in_node(cluster, 1, "sh", "-c", f"echo {{}} > /var/run/cdi/{name}")
    assert (cluster.node_root(1) / "var-run-cdi" / name).exists()
    assert name not in _in_node(cluster, 2, "ls", "/var/run/cdi")
    assert not (Path("/var/run/cdi") / name).exists()

    run_dir = tmp_path / "dra"
    proc = await asyncio.to_thread(_multi_node_specs, cluster.root, run_dir)
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    results = [r for r in junit.read_junit(run_dir / "report") if r.is_spec and r.outcome is not Outcome.NOT_SELECTED]
    outcomes = sorted((r.name, r.outcome) for r in results)
    assert [o for _, o in outcomes] == [Outcome.PASSED, Outcome.PASSED], outcomes
    assert all("on multiple nodes" in n for n, _ in outcomes)
    assert proc.returncode == 0

    netns = pod_netns(cluster)
    bridges = [node.settings.bridge for node in cluster.nodes(state)] + [state.fabric.bridge]
    cgroup_roots = [plan.cgroup_root for plan in state.nodes]
    await cluster.down()
    assert leftovers(cluster.root, netns, bridges, [n.veth for n in cluster.nodes(state)], cgroup_roots) == []
    print(f"total {time.monotonic() - started:.0f}s")
