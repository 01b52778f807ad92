"""`nodeagent cluster up --nodes N` / `nodeagent cluster down`: a kubeadm cluster on this machine, every node's
kubelet nodeagent (cluster.py, docs/kubeadm.md)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from nodeagent.cluster.cluster import Cluster, wait_nodes_ready
from nodeagent.testbed.versions import kubernetes_bin_dir

DEFAULT_DIR = Path("/var/tmp/nodeagent-cluster")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cluster = sub.add_parser("cluster", help="a kubeadm cluster on this machine with nodeagent as every kubelet")
    actions = cluster.add_subparsers(dest="action", required=True)
    up = actions.add_parser("up", help="kubeadm init, then N-1 kubeadm joins, each node with its own containerd")
    up.add_argument("--nodes", type=int, default=1, help="how many nodes (the first is the control plane)")
    up.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"the cluster's directory (default {DEFAULT_DIR})")
    up.add_argument(
        "--skip-kube-proxy",
        action="store_true",
        help="skip kubeadm's addon/kube-proxy phase, and addon/coredns with it (CoreDNS reaches the apiserver through "
        "a ClusterIP)",
    )
    down = actions.add_parser("down", help="kubeadm reset on every node, then stop and remove what `up` started")
    down.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    cluster.set_defaults(handler=run)


def _progress(line: str) -> None:
    print(f"[cluster] {line}", file=sys.stderr, flush=True)


async def run(args: argparse.Namespace) -> int:
    cluster = Cluster(args.dir, progress=_progress)
    if args.action == "down":
        removed = await cluster.down()
        _progress(f"removed {len(removed)} leftover(s)")
        return 0
    started = time.monotonic()
    state = await cluster.up(args.nodes, kube_proxy=not args.skip_kube_proxy)
    ready = await wait_nodes_ready(
        kubernetes_bin_dir() / "kubectl", cluster.admin_kubeconfig, [n.name for n in state.nodes], timeout=180
    )
    _progress(f"{len(state.nodes)} node(s) Ready in {time.monotonic() - started:.0f}s (+{ready:.0f}s after kubeadm)")
    print(f"export KUBECONFIG={cluster.admin_kubeconfig}")
    return 0
