"""kubeadm with nodeagent as the kubelet: from `kubeadm init` to the node Ready, and from `kubeadm join` to the second
node Ready, next to the floor: the same control-plane binaries started directly by the testbed (`nodeagent testbed
up`), then nodeagent started against it, to its node Ready.

The kubeadm figures include what kubeadm does (certificates, kubeconfigs, manifests, waits, bootstrap tokens, RBAC)
and what nodeagent does (the control plane as static pods; TLS bootstrap for the join); the floor has none of that:
the testbed's PKI and kubeconfigs are made by Python before it starts its processes. Images come from a local
registry in both (the cluster's control-plane images, built once and cached). kube-proxy and CoreDNS are skipped.

Prints one JSON line and one summary line. Run: `python -m benchmarks.kubeadm [--rounds 1] [--dir DIR]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import percentile
from nodeagent.cluster.cluster import Cluster, wait_nodes_ready
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import kubernetes_bin_dir

KUBECTL = kubernetes_bin_dir() / "kubectl"


async def kubeadm_round(root: Path) -> dict[str, float]:
    cluster = Cluster(root)
    try:
        started = time.monotonic()
        state = await cluster.up(1, kube_proxy=False)
        await wait_nodes_ready(KUBECTL, cluster.admin_kubeconfig, [state.nodes[0].name], timeout=180)
        ready = time.monotonic()
        up_to_ready = ready - started
        init_to_ready = ready - cluster.started["init"]
        node = await cluster.add_node()
        await wait_nodes_ready(KUBECTL, cluster.admin_kubeconfig, [node.plan.name], timeout=180)
        join_to_ready = time.monotonic() - cluster.started[f"join:{node.plan.name}"]
        return {"init_to_ready_s": init_to_ready, "join_to_ready_s": join_to_ready, "up_to_ready_s": up_to_ready}
    finally:
        await cluster.down()


async def floor_round(root: Path) -> dict[str, float]:
    bed = Testbed(root)
    try:
        started = time.monotonic()
        settings = await bed.up()
        control_plane = time.monotonic() - started
        agent_started = time.monotonic()
        await bed.start_agent()
        await wait_nodes_ready(KUBECTL, bed.layout.admin_kubeconfig, [settings.node_name], timeout=180)
        agent_to_ready = time.monotonic() - agent_started
        return {
            "testbed_up_to_ready_s": time.monotonic() - started,
            "control_plane_s": control_plane,
            "agent_to_ready_s": agent_to_ready,
        }
    finally:
        with contextlib.suppress(Exception):
            await bed.down()


def _stats(rounds: list[dict[str, float]], key: str) -> dict[str, float]:
    values = [r[key] for r in rounds]
    return {"p50_s": round(percentile(values, 0.5), 2), "max_s": round(max(values), 2)}


def summary_line(result: dict[str, Any]) -> str:
    k, f = result["kubeadm"], result["floor"]
    return (
        f"kubeadm ({result['rounds']} round(s)): init→node Ready p50 {k['init_to_ready']['p50_s']}s, "
        f"join→second node Ready p50 {k['join_to_ready']['p50_s']}s; floor (testbed up + nodeagent, control plane "
        f"started directly): up→node Ready p50 {f['testbed_up_to_ready']['p50_s']}s (control plane "
        f"{f['control_plane']['p50_s']}s, agent start→Ready {f['agent_to_ready']['p50_s']}s)"
    )


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=None, help="where the clusters and testbeds live (kept)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    base = args.dir or Path(tempfile.mkdtemp(prefix="nodeagent-bench-kubeadm-"))
    kubeadm: list[dict[str, float]] = []
    floor: list[dict[str, float]] = []
    for i in range(args.rounds):
        kubeadm.append(await kubeadm_round(base / f"cluster-{i}"))
        floor.append(await floor_round(base / f"testbed-{i}"))
    if args.dir is None:
        shutil.rmtree(base, ignore_errors=True)
    result = {
        "benchmark": "kubeadm",
        "rounds": args.rounds,
        "kubeadm": {key: _stats(kubeadm, f"{key}_s") for key in ("init_to_ready", "join_to_ready", "up_to_ready")},
        "floor": {key: _stats(floor, f"{key}_s") for key in ("testbed_up_to_ready", "control_plane", "agent_to_ready")},
    }
    print(json.dumps(result))
    print(summary_line(result))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
