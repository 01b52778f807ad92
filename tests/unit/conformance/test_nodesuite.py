"""The node-eviction selection of the node e2e suite, checked against the spec texts a dry run of e2e_node.test
v1.34.4 lists around it (testdata/e2e_node/eviction-neighbourhood.txt: the selection and its near misses)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from nodeagent.conformance.build import Suite
from nodeagent.conformance.nodesuite import DRY_RUN_SUITE_ARGS, EXPECTED_COUNTS, NODE_EVICTION, SUITE_DESCRIPTION
from nodeagent.conformance.speclist import E2E_SUITE_ARGS, dry_run_argv

LISTED = (Path(__file__).with_name("testdata") / "e2e_node" / "eviction-neighbourhood.txt").read_text().splitlines()


def test_the_groups_hold_the_specs_the_issue_names() -> None:
    counts = Counter(NODE_EVICTION.group_of(name) for name in LISTED)
    assert {k: v for k, v in counts.items() if k is not None} == EXPECTED_COUNTS
    assert sum(EXPECTED_COUNTS.values()) == 22


def test_eviction_is_exactly_eviction_test_go() -> None:
    eviction = sorted(name for name in LISTED if NODE_EVICTION.group_of(name) == "eviction")
    describes = Counter(name.split(" ")[1] for name in eviction)
    assert describes["PriorityPidEvictionOrdering"] == 3  # three contexts, one spec each
    assert "ImageGCNoEviction" in describes and "LocalStorageCapacityIsolationEviction" in describes
    assert len(describes) == 12


def test_near_misses_stay_out() -> None:
    outside = [name for name in LISTED if NODE_EVICTION.group_of(name) is None]
    assert sorted({name.split(" ")[1] for name in outside}) == ["GarbageCollect", "KubeletSeparateDiskGC"]
    assert len(outside) == 6  # GarbageCollect 3, KubeletSeparateDiskGC 3


def test_the_focus_selects_the_same_specs_as_ginkgo_sees_them() -> None:
    # ginkgo searches the focus in "<suite description> <spec text>"
    focus = re.compile(NODE_EVICTION.focus)
    chosen = [name for name in LISTED if focus.search(f"{SUITE_DESCRIPTION} {name}")]
    assert len(chosen) == 22


def test_the_dry_run_passes_the_node_suite_no_provider() -> None:
    suite = Suite(e2e_test=Path("/c/e2e_node.test"), ginkgo=Path("/c/ginkgo"))
    argv = dry_run_argv(suite, focus="x", label_filter="", report=Path("r"), suite_args=DRY_RUN_SUITE_ARGS)
    assert argv[-1] == "--" and argv[-2] == "/c/e2e_node.test"
    default = dry_run_argv(suite, focus="x", label_filter="", report=Path("r"))
    assert default[-2:] == ["--", *E2E_SUITE_ARGS]
