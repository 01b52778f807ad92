"""The fleet's plan: names, addresses, credentials, start offsets and the shared config, and its refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.cli import build_parser
from nodeagent.config.kubelet_config import TaintEffect
from nodeagent.fleet.command import options_from
from nodeagent.fleet.plan import FLEET_LABEL, FleetError, FleetOptions, plan_nodes, shared_config

DIR = Path("/fleet")


def test_names_addresses_offsets_and_a_shared_credential() -> None:
    plans = plan_nodes(FleetOptions(nodes=3, prefix="h", directory=DIR, kubeconfig=Path("/admin"), stagger=0.5))
    assert [(p.name, p.internal_ip, p.pod_network, p.start_after, p.kubeconfig) for p in plans] == [
        ("h-0", "198.19.128.1", "198.18.128.0/27", 0.0, Path("/admin")),
        ("h-1", "198.19.128.2", "198.18.128.32/27", 0.5, Path("/admin")),
        ("h-2", "198.19.128.3", "198.18.128.64/27", 1.0, Path("/admin")),
    ]
    assert len({p.machine_id for p in plans}) == 3


def test_a_shard_offset_keeps_names_and_addresses_stable() -> None:
    whole = plan_nodes(FleetOptions(nodes=6, prefix="h", directory=DIR, kubeconfig=Path("/k")))
    shard = plan_nodes(FleetOptions(nodes=3, prefix="h", directory=DIR, kubeconfig=Path("/k"), first=3))
    assert [(p.name, p.internal_ip, p.pod_network) for p in shard] == [
        (p.name, p.internal_ip, p.pod_network) for p in whole[3:]
    ]
    assert shard[0].start_after == 0.0


def test_eviction_is_off_unless_asked() -> None:
    assert options_from(build_parser().parse_args(["fleet", "--nodes", "1"]))[0].eviction is False
    assert options_from(build_parser().parse_args(["fleet", "--nodes", "1", "--eviction"]))[0].eviction is True


def test_pod_watch_is_per_node_unless_asked_and_shared_may_keep_per_node_credentials() -> None:
    assert options_from(build_parser().parse_args(["fleet", "--nodes", "1"]))[0].pod_watch == "per-node"
    args = build_parser().parse_args(
        ["fleet", "--nodes", "2", "--pod-watch", "shared", "--kubeconfig", "/admin", "--bootstrap-kubeconfig", "/b"]
    )
    options = options_from(args)[0]
    assert options.pod_watch == "shared"
    # The nodes still bootstrap their own credentials; --kubeconfig serves the shared watch.
    assert [p.kubeconfig for p in plan_nodes(options)] == [
        Path("/var/lib/nodeagent/fleet/nodes/fleet-0/kubelet.conf"),
        Path("/var/lib/nodeagent/fleet/nodes/fleet-1/kubelet.conf"),
    ]


def test_bootstrap_gives_every_node_its_own_kubeconfig() -> None:
    plans = plan_nodes(FleetOptions(nodes=2, prefix="h", directory=DIR, bootstrap_kubeconfig=Path("/boot")))
    assert [p.kubeconfig for p in plans] == [DIR / "nodes/h-0/kubelet.conf", DIR / "nodes/h-1/kubelet.conf"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"nodes": 0}, "at least 1"),
        ({"kubeconfig": None}, "--bootstrap-kubeconfig"),
        ({"prefix": "Bad_Prefix"}, "lower-case"),
        ({"nodes": 1025}, "1025 nodes from ordinal 0 need 1025"),
        ({"nodes": 2, "first": 1023}, "need 1025"),
        ({"max_pods": 31}, "--max-pods 31 does not fit a /27"),
        ({"pod_prefix_length": 16}, "larger than"),
        ({"pod_watch": "sometimes"}, "want one of per-node, shared"),
        ({"max_requests": -1}, "--max-requests -1: want 0"),
        ({"max_requests": 17}, r"--max-requests 17: want 0 \(no bound\) to 16"),
        # Per-node credentials may list only their own pods: the shared watch needs the admin's.
        ({"kubeconfig": None, "bootstrap_kubeconfig": Path("/boot"), "pod_watch": "shared"}, "needs --kubeconfig"),
    ],
)
def test_refusals(changes: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"nodes": 1, "prefix": "h", "directory": DIR, "kubeconfig": Path("/k")}
    with pytest.raises(FleetError, match=message):
        plan_nodes(FleetOptions(**{**base, **changes}))  # type: ignore[arg-type]


def test_shared_config_has_no_host_servers_and_the_fleet_taint() -> None:
    config = shared_config(FleetOptions(nodes=1, prefix="h", directory=DIR, kubeconfig=Path("/k")))
    assert (config.enable_server, config.healthz_port, config.read_only_port, config.cgroups_per_qos) == (
        False,
        0,
        0,
        False,
    )
    assert [(t.key, t.value, t.effect) for t in config.register_with_taints] == [
        (FLEET_LABEL, "h", TaintEffect.NO_SCHEDULE)
    ]
    none = shared_config(FleetOptions(nodes=1, prefix="h", directory=DIR, kubeconfig=Path("/k"), taints=()))
    assert none.register_with_taints == ()
    with pytest.raises(FleetError, match="taint"):
        shared_config(FleetOptions(nodes=1, prefix="h", directory=DIR, kubeconfig=Path("/k"), taints=("k=v",)))


def test_command_line() -> None:
    args = build_parser().parse_args(
        ["fleet", "--nodes", "5", "--prefix", "p", "--kubeconfig", "/k", "--memory", "2Gi", "--labels", "a=b",
         "--taints", "", "--pull-latency", "0.5"]
    )  # fmt: skip
    options, behaviour = options_from(args)
    assert (options.nodes, options.prefix, options.memory_bytes, dict(options.labels), options.taints) == (
        5,
        "p",
        2 << 30,
        {"a": "b"},
        (),
    )
    assert behaviour.pull_latency == 0.5
    assert args.switch_interval is None  # Python's own unless asked
    faster = build_parser().parse_args(["fleet", "--nodes", "1", "--switch-interval", "0.001"])
    assert faster.switch_interval == 0.001
