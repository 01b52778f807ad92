"""What a fleet is, computed before anything runs: node names, addresses, the config every node shares, when each
starts. Pure, so the planning errors (too many nodes for the address ranges, bad labels or taints) come first."""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nodeagent.config import KubeletConfiguration
from nodeagent.config.loading import parse_config
from nodeagent.kube.client import MAX_REQUESTS_BOUND, MAX_WATCHES
from nodeagent.kube.transport import MAX_KEEPALIVE_CONNECTIONS

# Pod and node addresses of emulated nodes come from the network-testing range (RFC 2544), away from the /24s the
# testbeds take for themselves (198.18.N.0/24 with small N) and their services (198.19.0.0/24).
DEFAULT_POD_NETWORK = "198.18.128.0/17"
DEFAULT_NODE_NETWORK = "198.19.128.0/17"
# 30 addresses per node, 1,024 nodes in the default pod network: a density test's 30 pods per node.
DEFAULT_PODS_PER_NODE_PREFIX = 27
DEFAULT_MAX_PODS = 30
# Requests one node sends at once, watches apart (`KubeClient(max_requests=)`; 0: no bound): each holds a connection
# to the apiserver while under way (docs/fleet.md, "Connections per node").
DEFAULT_MAX_REQUESTS = 4
FLEET_LABEL = "node.nodeagent.io/fleet"
# How the nodes' pods are watched: each node its own list+watch (spec.nodeName=<node>), as real kubelets load the
# apiserver; or one list+watch of every bound pod for the whole process, demultiplexed by node (cheaper).
POD_WATCH_PER_NODE = "per-node"
POD_WATCH_SHARED = "shared"
POD_WATCHES = (POD_WATCH_PER_NODE, POD_WATCH_SHARED)


class FleetError(ValueError):
    """The fleet cannot be planned or started: a bad option, or more nodes than the address ranges hold."""


@dataclass(frozen=True)
class FleetOptions:
    nodes: int
    prefix: str
    directory: Path
    kubeconfig: Path | None = None
    bootstrap_kubeconfig: Path | None = None
    first: int = 0  # the first ordinal (a shard's offset): names are <prefix>-<first> ... <prefix>-<first+nodes-1>
    stagger: float = 0.05  # seconds between two nodes' starts
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[str, ...] | None = None  # None: the fleet's NoSchedule taint
    cpu: int = 4
    memory_bytes: int = 16 << 30
    max_pods: int = DEFAULT_MAX_PODS
    pod_network: str = DEFAULT_POD_NETWORK
    node_network: str = DEFAULT_NODE_NETWORK
    pod_prefix_length: int = DEFAULT_PODS_PER_NODE_PREFIX
    pleg: str = "evented"
    # The kubelet API of every node on this one port (0: none), each node on its own address (`kubeletapi`).
    kubelet_port: int = 0
    tls_cert_file: Path | None = None  # None: a self-signed certificate for every node address
    tls_private_key_file: Path | None = None
    client_ca_file: Path | None = None  # the CA of client certificates (the apiserver's kubelet client)
    pod_watch: str = POD_WATCH_PER_NODE  # POD_WATCHES; shared watches with `kubeconfig`
    eviction: bool = False  # every node runs the eviction manager's cycle (`Emulation.eviction`)
    max_requests: int = DEFAULT_MAX_REQUESTS  # each node's requests under way at once (0: no bound)


@dataclass(frozen=True)
class NodePlan:
    name: str
    ordinal: int
    internal_ip: str
    pod_network: str
    start_after: float
    root_dir: Path
    kubeconfig: Path
    machine_id: str


def default_taint(prefix: str) -> str:
    """As KWOK's nodes: pods not meant for emulated nodes stay off them unless they tolerate this."""
    return f"{FLEET_LABEL}={prefix}:NoSchedule"


def _taint_doc(text: str) -> dict[str, str]:
    key_value, sep, effect = text.rpartition(":")
    if not sep or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute") or not key_value:
        raise FleetError(f"taint {text!r}: want key[=value]:NoSchedule|PreferNoSchedule|NoExecute")
    key, _, value = key_value.partition("=")
    doc = {"key": key, "effect": effect}
    if value:
        doc["value"] = value
    return doc


def shared_config(options: FleetOptions) -> KubeletConfiguration:
    """The KubeletConfiguration every node of the fleet runs with: no host-level servers (healthz, read-only port),
    no QoS cgroups, no certificate rotation, no host DNS; the fleet's taints. The kubelet API only with
    `kubelet_port`: then each node serves it through the fleet's listener, authenticated (client certificates of
    `client_ca_file`, bearer tokens by TokenReview) and authorized (SubjectAccessReview) as upstream's defaults do."""
    taints = options.taints if options.taints is not None else (default_taint(options.prefix),)
    doc = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "enableServer": bool(options.kubelet_port),
        "port": options.kubelet_port or 10250,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(options.client_ca_file) if options.client_ca_file else ""},
        },
        "authorization": {"mode": "Webhook"},
        "healthzPort": 0,
        "readOnlyPort": 0,
        "failSwapOn": False,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "resolvConf": "",
        "maxPods": options.max_pods,
        "registerWithTaints": [_taint_doc(t) for t in taints],
        "pleg": options.pleg,
        # The host's disk and memory are not the emulated node's: no eviction on them.
        "evictionHard": {"memory.available": "0%"},
    }
    try:
        loaded = parse_config(json.dumps(doc), source="fleet")
    except ValueError as exc:
        raise FleetError(f"the fleet's config: {exc}") from exc
    return loaded.config


def plan_nodes(options: FleetOptions) -> list[NodePlan]:
    if options.nodes < 1:
        raise FleetError("--nodes must be at least 1")
    shared_kubeconfig = options.kubeconfig
    if options.bootstrap_kubeconfig is None and shared_kubeconfig is None:
        raise FleetError(
            "--kubeconfig (one credential for every node) or --bootstrap-kubeconfig (one per node) is needed"
        )
    if options.pod_watch not in POD_WATCHES:
        raise FleetError(f"--pod-watch {options.pod_watch!r}: want one of {', '.join(POD_WATCHES)}")
    if options.pod_watch == POD_WATCH_SHARED and shared_kubeconfig is None:
        raise FleetError(
            "--pod-watch shared lists every pod bound to a node: it needs --kubeconfig, a credential that may list "
            "every pod (the admin's); a node's own credential (--bootstrap-kubeconfig) may list only the pods bound "
            "to it"
        )
    if not 0 <= options.max_requests <= MAX_REQUESTS_BOUND:
        raise FleetError(
            f"--max-requests {options.max_requests}: want 0 (no bound) to {MAX_REQUESTS_BOUND} "
            f"(the client keeps {MAX_KEEPALIVE_CONNECTIONS} connections, {MAX_WATCHES} of them for watches)"
        )
    if not options.prefix or not options.prefix.replace("-", "").isalnum() or options.prefix != options.prefix.lower():
        raise FleetError(f"--prefix {options.prefix!r}: want lower-case letters, digits and dashes")
    pods = ipaddress.ip_network(options.pod_network)
    if options.pod_prefix_length < pods.prefixlen:
        raise FleetError(f"per-node pod networks /{options.pod_prefix_length} are larger than {pods}")
    per_node = 2 ** (pods.max_prefixlen - options.pod_prefix_length) - 2
    if options.max_pods > per_node:
        raise FleetError(
            f"--max-pods {options.max_pods} does not fit a /{options.pod_prefix_length} per node ({per_node} "
            "addresses): lower it or give a shorter --pod-prefix-length"
        )
    pod_subnets = pods.subnets(new_prefix=options.pod_prefix_length)
    node_hosts = ipaddress.ip_network(options.node_network).hosts()
    last = options.first + options.nodes
    capacity = min(
        2 ** (options.pod_prefix_length - pods.prefixlen), ipaddress.ip_network(options.node_network).num_addresses - 2
    )
    if last > capacity:
        raise FleetError(
            f"{options.nodes} nodes from ordinal {options.first} need {last} node and pod networks; "
            f"{options.pod_network} in /{options.pod_prefix_length}s and {options.node_network} hold {capacity}"
        )
    plans = []
    for ordinal in range(last):
        subnet, address = next(pod_subnets), next(node_hosts)
        if ordinal < options.first:
            continue
        name = f"{options.prefix}-{ordinal}"
        root = options.directory / "nodes" / name
        plans.append(
            NodePlan(
                name=name,
                ordinal=ordinal,
                internal_ip=str(address),
                pod_network=str(subnet),
                start_after=(ordinal - options.first) * options.stagger,
                root_dir=root,
                kubeconfig=root / "kubelet.conf"
                if shared_kubeconfig is None or options.bootstrap_kubeconfig
                else shared_kubeconfig,
                machine_id=hashlib.md5(name.encode(), usedforsecurity=False).hexdigest(),
            )
        )
    return plans


@dataclass(frozen=True)
class Shard:
    """Which part of a sharded fleet this process runs: pod `ordinal` of the StatefulSet, process `process` of the
    `processes` the pod runs (one per core). Each owns `nodes` consecutive ordinals, so shards never overlap and a
    restarted shard (same pod name, same process index) runs the same node names again."""

    ordinal: int
    process: int = 0
    processes: int = 1

    def first(self, nodes: int) -> int:
        return (self.ordinal * self.processes + self.process) * nodes


def shard_ordinal(name: str) -> int:
    """The ordinal of a StatefulSet's pod from its name, `<statefulset>-<ordinal>` (a pod's hostname is its name;
    a domain after it is ignored). Refused unless it ends in a decimal ordinal without leading zeros."""
    short = name.split(".", 1)[0]
    base, sep, digits = short.rpartition("-")
    if not sep or not base or not digits or not (digits.isascii() and digits.isdigit()):
        raise FleetError(f"shard name {name!r}: want <statefulset>-<ordinal>, a StatefulSet pod's name")
    if len(digits) > 1 and digits.startswith("0"):
        raise FleetError(f"shard name {name!r}: the ordinal {digits} has a leading zero; a StatefulSet gives none")
    return int(digits)


def parse_shard_process(text: str) -> tuple[int, int]:
    """`I/P`: this process is number I (from 0) of the P processes of one shard pod."""
    index, sep, count = text.partition("/")
    try:
        process, processes = int(index), int(count)
    except ValueError:
        raise FleetError(f"--shard-process {text!r}: want I/P, e.g. 0/2") from None
    if not sep or processes < 1 or not 0 <= process < processes:
        raise FleetError(f"--shard-process {text!r}: want I/P with 0 <= I < P")
    return process, processes
