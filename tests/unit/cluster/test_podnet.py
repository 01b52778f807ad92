"""The FORWARD rules that let a cluster's pods reach each other across its nodes' bridges (cluster/podnet.py)."""

from __future__ import annotations

import pytest

from nodeagent.cluster.podnet import COMMENT, accept_rule, rules_between


def test_accept_rule_names_both_bridges_and_the_comment() -> None:
    assert accept_rule("naA", "naB") == [
        "-i",
        "naA",
        "-o",
        "naB",
        "-m",
        "comment",
        "--comment",
        COMMENT,
        "-j",
        "ACCEPT",
    ]


@pytest.mark.parametrize(
    ("bridges", "pairs"),
    [
        ([], []),
        (["a"], []),
        (["a", "b"], [("a", "b"), ("b", "a")]),
        (["a", "b", "c"], [("a", "b"), ("a", "c"), ("b", "a"), ("b", "c"), ("c", "a"), ("c", "b")]),
    ],
)
def test_rules_between_every_ordered_pair(bridges: list[str], pairs: list[tuple[str, str]]) -> None:
    assert [(r[1], r[3]) for r in rules_between(bridges)] == pairs
