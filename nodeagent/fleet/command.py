"""`nodeagent fleet`: the command line of many emulated nodes in one process."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from cri.fake import Behaviour
from nodeagent.config.quantity import parse_quantity
from nodeagent.fleet.capacity import check_capacity, estimate, raise_nofile, read_host_limits
from nodeagent.fleet.fleet import run_fleet
from nodeagent.fleet.plan import (
    DEFAULT_MAX_PODS,
    DEFAULT_MAX_REQUESTS,
    DEFAULT_NODE_NETWORK,
    DEFAULT_POD_NETWORK,
    DEFAULT_PODS_PER_NODE_PREFIX,
    POD_WATCH_PER_NODE,
    POD_WATCHES,
    FleetError,
    FleetOptions,
    Shard,
    parse_shard_process,
    shard_ordinal,
)

DEFAULT_DIR = Path("/var/lib/nodeagent/fleet")

log = logging.getLogger("nodeagent.fleet.command")


def _labels(text: str) -> dict[str, str]:
    labels = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"label {item!r}: want key=value")
        labels[key] = value
    return labels


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fleet = sub.add_parser(
        "fleet", help="many emulated nodes in one process (the agent's logic over an in-process fake runtime)"
    )
    fleet.add_argument("--nodes", type=int, required=True, help="how many nodes")
    fleet.add_argument("--prefix", default="fleet", help="node names are <prefix>-<ordinal>")
    fleet.add_argument("--first", type=int, default=None, help="the first ordinal (a shard's offset; default 0)")
    fleet.add_argument(
        "--shard-from-hostname",
        nargs="?",
        const="",
        default=None,
        metavar="NAME",
        help="run one shard of a StatefulSet: --first is <ordinal> x --nodes, the ordinal from this host's name "
        "<statefulset>-<ordinal> (a pod's hostname is its name), or from NAME if given (e.g. $(POD_NAME) from the "
        "downward API, for hostNetwork pods, whose hostname is the node's)",
    )
    fleet.add_argument(
        "--shard-process",
        default="0/1",
        metavar="I/P",
        help="with --shard-from-hostname: this is process I (from 0) of P in the shard's pod, one per core; the pod "
        "owns P x --nodes ordinals",
    )
    fleet.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="one credential for every node (e.g. admin); also the fleet's own, for its one watch of Services "
        "and of RuntimeClasses shared by the nodes (without it, each node watches both with its own credential)",
    )
    fleet.add_argument(
        "--bootstrap-kubeconfig",
        type=Path,
        default=None,
        help="TLS bootstrap per node: each node gets its own client certificate (system:node:<name>) with this "
        "kubeconfig's bootstrap token, so the Node authorizer and NodeRestriction hold",
    )
    fleet.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the nodes' root dirs and certificates")
    fleet.add_argument("--stagger", type=float, default=0.05, help="seconds between two nodes' starts")
    fleet.add_argument("--labels", type=_labels, default={}, help="k=v,... on every node")
    fleet.add_argument(
        "--taints",
        default=None,
        help="key[=value]:Effect,... on every node (default: node.nodeagent.io/fleet=<prefix>:NoSchedule; '' none)",
    )
    fleet.add_argument("--cpu", type=int, default=4, help="each node's CPU capacity")
    fleet.add_argument("--memory", default="16Gi", help="each node's memory capacity")
    fleet.add_argument("--max-pods", type=int, default=DEFAULT_MAX_PODS, help="each node's pod capacity")
    fleet.add_argument(
        "--pod-prefix-length",
        type=int,
        default=DEFAULT_PODS_PER_NODE_PREFIX,
        help="each node's slice of --pod-network (its pods' addresses)",
    )
    fleet.add_argument("--pod-network", default=DEFAULT_POD_NETWORK)
    fleet.add_argument("--node-network", default=DEFAULT_NODE_NETWORK)
    fleet.add_argument("--pleg", default="evented", choices=("generic", "evented", "auto"))
    fleet.add_argument(
        "--eviction",
        action="store_true",
        help="run every node's eviction manager (its cycle every 10 s over every pod; off by default: the only "
        "thresholds an emulated node has are local-storage limits against the fake runtime's usage)",
    )
    fleet.add_argument(
        "--pod-watch",
        default=POD_WATCH_PER_NODE,
        choices=POD_WATCHES,
        help="per-node: each node lists and watches its own pods (spec.nodeName=<node>), the apiserver load of real "
        "kubelets; shared: one list+watch of every bound pod for the whole fleet, fanned out to the nodes (cheaper; "
        "needs --kubeconfig, which then serves only the fleet's shared watches when --bootstrap-kubeconfig is "
        "also given)",
    )
    fleet.add_argument(
        "--kubelet-port",
        type=int,
        default=0,
        help="serve every node's kubelet API (healthz, pods, stats/summary, metrics, containerLogs) on this port of "
        "its own address (0: none). The node addresses must be local: `ip route add local <node-network> dev lo`",
    )
    fleet.add_argument(
        "--tls-cert-file", type=Path, default=None, help="the kubelet API's certificate, for every node address"
    )
    fleet.add_argument("--tls-private-key-file", type=Path, default=None)
    fleet.add_argument(
        "--client-ca-file", type=Path, default=None, help="the CA of the apiserver's kubelet client certificate"
    )
    fleet.add_argument(
        "--max-requests",
        type=int,
        default=DEFAULT_MAX_REQUESTS,
        help="requests each node sends to the apiserver at once, watches apart (each holds a connection while under "
        "way; more wait their turn); 0: no bound, a connection per concurrent request as a single agent",
    )
    fleet.add_argument("--pull-latency", type=float, default=0.0, help="seconds per image pull")
    fleet.add_argument("--start-latency", type=float, default=0.0, help="seconds per container start")
    fleet.add_argument("--cpu-millicores", type=int, default=1, help="each container's reported CPU use")
    fleet.add_argument("--memory-bytes", type=int, default=4 << 20, help="each container's reported working set")
    fleet.add_argument(
        "--switch-interval",
        type=float,
        default=None,
        help="the interpreter's thread switch interval in seconds (sys.setswitchinterval; Python's default 0.005): "
        "shorter, the lease thread waits less for the GIL while the nodes' loop is busy",
    )
    fleet.add_argument(
        "--no-capacity-check",
        action="store_true",
        help="start even when the nodes' estimated memory or file descriptors exceed what the machine gives",
    )
    fleet.set_defaults(handler=run)


def shard_of(args: argparse.Namespace, hostname: Callable[[], str] = socket.gethostname) -> Shard | None:
    """The shard this process runs (None: not a shard), from --shard-from-hostname and --shard-process."""
    if args.shard_from_hostname is None:
        if args.shard_process != "0/1":
            raise FleetError("--shard-process needs --shard-from-hostname")
        return None
    if args.first is not None:
        raise FleetError("--first and --shard-from-hostname exclude each other: the shard's ordinal gives --first")
    process, processes = parse_shard_process(args.shard_process)
    return Shard(shard_ordinal(args.shard_from_hostname or hostname()), process, processes)


def options_from(
    args: argparse.Namespace, hostname: Callable[[], str] = socket.gethostname
) -> tuple[FleetOptions, Behaviour]:
    shard = shard_of(args, hostname)
    first = shard.first(args.nodes) if shard is not None else (args.first or 0)
    if shard is not None:
        log.info(
            "fleet shard ordinal=%d process=%d processes=%d first=%d nodes=%d",
            shard.ordinal,
            shard.process,
            shard.processes,
            first,
            args.nodes,
        )
    taints = None if args.taints is None else tuple(filter(None, args.taints.split(",")))
    try:
        memory = int(parse_quantity(args.memory))
    except ValueError as exc:
        raise FleetError(f"--memory {args.memory!r}: {exc}") from exc
    options = FleetOptions(
        nodes=args.nodes,
        prefix=args.prefix,
        directory=args.dir,
        kubeconfig=args.kubeconfig,
        bootstrap_kubeconfig=args.bootstrap_kubeconfig,
        first=first,
        stagger=args.stagger,
        labels=args.labels,
        taints=taints,
        cpu=args.cpu,
        memory_bytes=memory,
        max_pods=args.max_pods,
        pod_network=args.pod_network,
        pod_prefix_length=args.pod_prefix_length,
        node_network=args.node_network,
        pleg=args.pleg,
        eviction=args.eviction,
        max_requests=args.max_requests,
        kubelet_port=args.kubelet_port,
        tls_cert_file=args.tls_cert_file,
        tls_private_key_file=args.tls_private_key_file,
        client_ca_file=args.client_ca_file,
        pod_watch=args.pod_watch,
    )
    behaviour = Behaviour(
        pull_latency=args.pull_latency,
        start_latency=args.start_latency,
        cpu_millicores=args.cpu_millicores,
        memory_bytes=args.memory_bytes,
    )
    return options, behaviour


def _check_capacity(options: FleetOptions, *, enforce: bool) -> None:
    """Before any node starts: the soft file descriptor limit raised to the hard one, then memory and descriptors
    compared with the nodes' estimate (`capacity`); a fleet that does not fit is refused unless not `enforce`."""
    raise_nofile()
    limits = read_host_limits()
    need = estimate(options.nodes, options.max_pods, kubelet_api=bool(options.kubelet_port))
    log.info(
        "fleet capacity nodes=%d max_pods=%d memory_estimate=%dMiB memory_available=%dMiB fds_estimate=%d "
        "nofile=%d cpus=%d",
        options.nodes,
        options.max_pods,
        need.memory >> 20,
        limits.memory_available >> 20,
        need.fds,
        limits.nofile,
        limits.cpus,
    )
    try:
        warnings = check_capacity(options, limits)
    except FleetError as exc:
        if enforce:
            raise
        log.warning("fleet capacity exceeded, starting anyway (--no-capacity-check) problem=%s", exc)
        return
    for warning in warnings:
        log.warning("fleet capacity %s", warning)


async def run(args: argparse.Namespace) -> int:
    if not args.verbose:
        # A thousand agents' INFO lines drown everything: the fleet's own lines and every agent's warnings stay.
        logging.getLogger().setLevel(logging.WARNING)
        logging.getLogger("nodeagent.fleet").setLevel(logging.INFO)
    options, behaviour = options_from(args)
    if args.switch_interval is not None:
        if args.switch_interval <= 0:
            raise FleetError(f"--switch-interval {args.switch_interval}: want seconds > 0")
        sys.setswitchinterval(args.switch_interval)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    _check_capacity(options, enforce=not args.no_capacity_check)
    result = await run_fleet(options, behaviour, stop)
    return 1 if result.failed else 0
