"""`nodeagent cluster up --nodes N` / `nodeagent cluster down`: a kubeadm cluster on this machine, every node's
kubelet nodeagent (cluster.py, docs/kubeadm.md)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from nodeagent.cluster.cluster import Cluster, ClusterError, wait_nodes_ready
from nodeagent.conformance import presets
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
    up.add_argument(
        "--runtime-config",
        default=None,
        help="the apiserver's --runtime-config: API versions to serve beyond the defaults "
        "(e.g. resource.k8s.io/v1beta1=true)",
    )
    up.add_argument(
        "--preset",
        choices=sorted(name for name, preset in presets.PRESETS.items() if preset.runtime_config),
        default=None,
        help="set the cluster up as `nodeagent conformance --preset NAME` needs it (devices: upstream's DRA cluster, "
        "resource.k8s.io v1beta1 and v1beta2 served; docs/devices.md)",
    )
    down = actions.add_parser("down", help="kubeadm reset on every node, then stop and remove what `up` started")
    down.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    cluster.set_defaults(handler=run)


def runtime_config_for(preset: str | None, runtime_config: str | None) -> str:
    """The apiserver's --runtime-config from `--preset` or `--runtime-config` (not both); empty: the defaults."""
    if preset is not None and runtime_config is not None:
        raise ClusterError("give --preset or --runtime-config, not both")
    if preset is not None:
        return presets.PRESETS[preset].runtime_config
    return runtime_config or ""


def _progress(line: str) -> None:
    print(f"[cluster] {line}", file=sys.stderr, flush=True)


async def run(args: argparse.Namespace) -> int:
    cluster = Cluster(args.dir, progress=_progress)
    if args.action == "down":
        removed = await cluster.down()
        _progress(f"removed {len(removed)} leftover(s)")
        return 0
    runtime_config = runtime_config_for(args.preset, args.runtime_config)
    started = time.monotonic()
    state = await cluster.up(args.nodes, kube_proxy=not args.skip_kube_proxy, runtime_config=runtime_config)
    ready = await wait_nodes_ready(
        kubernetes_bin_dir() / "kubectl", cluster.admin_kubeconfig, [n.name for n in state.nodes], timeout=180
    )
    _progress(f"{len(state.nodes)} node(s) Ready in {time.monotonic() - started:.0f}s (+{ready:.0f}s after kubeadm)")
    print(f"export KUBECONFIG={cluster.admin_kubeconfig}")
    return 0
