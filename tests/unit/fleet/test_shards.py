"""A fleet shard of a StatefulSet: its ordinal from the pod's name, the nodes it owns (disjoint from every other
shard's and process's, the same after a restart), and the command line that asks for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.cli import build_parser
from nodeagent.fleet.command import options_from
from nodeagent.fleet.plan import FleetError, FleetOptions, Shard, parse_shard_process, plan_nodes, shard_ordinal


@pytest.mark.parametrize(
    ("name", "ordinal"),
    [
        ("fleet-0", 0),
        ("fleet-7", 7),
        ("hollow-shard-12", 12),
        ("fleet-3.fleet.ns.svc.cluster.local", 3),  # an FQDN: the pod name is its first label
    ],
)
def test_the_ordinal_is_the_pod_names_last_part(name: str, ordinal: int) -> None:
    assert shard_ordinal(name) == ordinal


@pytest.mark.parametrize("name", ["fleet", "fleet-", "-3", "fleet-x", "fleet-01", "fleet-٣", "node1"])
def test_a_name_that_is_not_a_statefulset_pods_is_refused(name: str) -> None:
    with pytest.raises(FleetError, match="shard name"):
        shard_ordinal(name)


@pytest.mark.parametrize(("text", "parsed"), [("0/1", (0, 1)), ("1/2", (1, 2)), ("3/4", (3, 4))])
def test_shard_process(text: str, parsed: tuple[int, int]) -> None:
    assert parse_shard_process(text) == parsed


@pytest.mark.parametrize("text", ["2/2", "-1/2", "0/0", "1", "a/b", "1/2/3"])
def test_a_bad_shard_process_is_refused(text: str) -> None:
    with pytest.raises(FleetError, match="--shard-process"):
        parse_shard_process(text)


def test_shards_and_their_processes_own_disjoint_consecutive_nodes() -> None:
    nodes, owned = 3, []
    for ordinal in range(3):
        for process in range(2):
            first = Shard(ordinal, process, 2).first(nodes)
            plans = plan_nodes(
                FleetOptions(nodes=nodes, prefix="h", directory=Path("/f"), kubeconfig=Path("/k"), first=first)
            )
            owned.append([(p.name, p.internal_ip, p.pod_network) for p in plans])
    flat = [node for shard in owned for node in shard]
    assert len(set(flat)) == len(flat) == 18  # no name, node address or pod network in two shards
    whole = plan_nodes(FleetOptions(nodes=18, prefix="h", directory=Path("/f"), kubeconfig=Path("/k")))
    assert flat == [(p.name, p.internal_ip, p.pod_network) for p in whole]  # and none skipped
    assert [name for name, _, _ in owned[3]] == ["h-9", "h-10", "h-11"]  # pod 1, process 1


def _args(*extra: str) -> list[str]:
    return ["fleet", "--nodes", "3", "--prefix", "h", "--kubeconfig", "/k", *extra]


def test_the_command_line_takes_the_ordinal_from_the_hostname_or_a_given_name() -> None:
    def hostname() -> str:
        return "hollow-2"

    options, _ = options_from(build_parser().parse_args(_args("--shard-from-hostname")), hostname)
    assert options.first == 6  # pod 2 of a StatefulSet, 3 nodes a pod: h-6, h-7, h-8
    # The same pod restarted (same name) runs the same nodes.
    again, _ = options_from(build_parser().parse_args(_args("--shard-from-hostname")), hostname)
    assert [p.name for p in plan_nodes(again)] == [p.name for p in plan_nodes(options)] == ["h-6", "h-7", "h-8"]
    # A name given (a hostNetwork pod's $(POD_NAME)) wins over the hostname, which is then the node's.
    named, _ = options_from(build_parser().parse_args(_args("--shard-from-hostname", "hollow-1")), hostname)
    assert named.first == 3
    process, _ = options_from(
        build_parser().parse_args(_args("--shard-from-hostname", "--shard-process", "1/2")), hostname
    )
    assert process.first == (2 * 2 + 1) * 3
    plain, _ = options_from(build_parser().parse_args(_args()), hostname)
    assert plain.first == 0
    offset, _ = options_from(build_parser().parse_args(_args("--first", "5")), hostname)
    assert offset.first == 5


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--shard-from-hostname", "--first", "3"), "exclude each other"),
        (("--shard-process", "1/2"), "needs --shard-from-hostname"),
        (("--shard-from-hostname", "not-a-pod"), "shard name"),
    ],
)
def test_conflicting_or_bad_shard_options_are_refused(extra: tuple[str, ...], message: str) -> None:
    with pytest.raises(FleetError, match=message):
        options_from(build_parser().parse_args(_args(*extra)), lambda: "hollow-0")
