"""The certified specs from a ginkgo dry run's JSON report, and a focus that selects exactly a list of them.

dry-run.json is a real report of `ginkgo --dry-run --focus='\\[Conformance\\]' --json-report=...` of e2e.test
v1.34.4, cut to a few entries (and without their event lists).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nodeagent.conformance.build import Suite
from nodeagent.conformance.errors import ConformanceError
from nodeagent.conformance.speclist import (
    MAX_FOCUS,
    ListedSpec,
    SpecList,
    dry_run_argv,
    exact_focus,
    narrow,
    parse_dry_run,
)

DRY_RUN = (Path(__file__).with_name("testdata") / "certified" / "dry-run.json").read_text()
PATCH_NS = "[sig-api-machinery] Namespaces [Serial] should patch a Namespace [Conformance]"
PODNAME = "[sig-storage] Downward API volume should provide podname only [NodeConformance] [Conformance]"
CRONJOB = "[sig-apps] CronJob should not schedule jobs when suspended [Slow] [Conformance]"


def test_parse_keeps_the_selected_specs_sorted_with_their_labels() -> None:
    listed = parse_dry_run(DRY_RUN)
    assert listed.description == "Kubernetes e2e suite"
    names = [spec.name for spec in listed.specs]
    assert names == sorted(names) and len(names) == 6
    # Suite nodes and the spec the focus left out (state "skipped") are not specs to run.
    assert not any("non-root with fsgroup" in name for name in names)
    by_name = {spec.name: spec for spec in listed.specs}
    assert by_name[PODNAME].labels == ("sig-storage", "NodeConformance", "Conformance")
    assert (by_name[PATCH_NS].serial, by_name[PATCH_NS].slow) == (True, False)
    assert (by_name[CRONJOB].serial, by_name[CRONJOB].slow) == (False, True)
    assert not by_name[PODNAME].serial
    taint = next(spec for spec in listed.specs if "removing taint" in spec.name)
    assert taint.serial and "Disruptive" in taint.labels


@pytest.mark.parametrize("text", ["not json", "[]", '[{"SpecReports": []}]'])
def test_parse_refuses_what_is_not_a_dry_run(text: str) -> None:
    with pytest.raises(ConformanceError, match="dry run"):
        parse_dry_run(text)


def test_exact_focus_selects_exactly_the_listed_texts() -> None:
    names = [PODNAME, PATCH_NS]
    focus = exact_focus("Kubernetes e2e suite", names)
    assert focus.startswith("^Kubernetes e2e suite (?:") and focus.endswith(")$")
    # ginkgo matches the focus against the suite's description, a space and the spec's full text; Python's re reads
    # this subset of RE2 the same way.
    for name in names:
        assert re.search(focus, f"Kubernetes e2e suite {name}")
    # A spec whose text only contains a listed one is not selected (an unanchored focus would select it).
    assert not re.search(focus, f"Kubernetes e2e suite {PODNAME} [Slow]")
    assert not re.search(focus, f"Kubernetes e2e suite [sig-x] {PATCH_NS}")
    assert not re.search(focus, PODNAME)  # without the description, as ginkgo never matches
    assert r"\ " not in focus  # RE2 refuses escaped spaces


def test_exact_focus_matches_what_ginkgo_sees_of_a_name_with_an_empty_container() -> None:
    # The dry run's name joins every container's text, the empty Context("") of eviction_test.go too (two spaces);
    # ginkgo's focus sees the texts that are not empty, joined by one space (checked on e2e_node.test 2026-11-29).
    name = (
        "[sig-node] PriorityPidEvictionOrdering [Slow] [Serial] [Disruptive] [Feature:Eviction] when we run "
        "containers with PodAndContainerStatsFromCRI=false that should cause PIDPressure  should eventually evict "
        "all of the correct pods"
    )
    focus = exact_focus("E2eNode Suite", [name])
    assert re.search(focus, "E2eNode Suite " + name.replace("  ", " "))
    assert re.search(focus, "E2eNode Suite " + name)
    assert not re.search(focus, "E2eNode Suite " + name.replace("  ", " x "))


def test_exact_focus_refuses_what_one_argument_cannot_hold() -> None:
    with pytest.raises(ConformanceError, match="too long"):
        exact_focus("Kubernetes e2e suite", [f"spec {i} " + "x" * 200 for i in range(MAX_FOCUS // 200)])


def test_dry_run_argv() -> None:
    suite = Suite(e2e_test=Path("/c/e2e.test"), ginkgo=Path("/c/ginkgo"))
    argv = dry_run_argv(suite, focus=r"\[Conformance\]", label_filter="NodeConformance", report=Path("/d/r.json"))
    assert argv[:2] == ["/c/ginkgo", "--dry-run"]
    assert r"--focus=\[Conformance\]" in argv and "--label-filter=NodeConformance" in argv
    assert "--json-report=/d/r.json" in argv
    assert not any(arg.startswith("--skip") for arg in argv)  # certification skips nothing
    assert argv[argv.index("/c/e2e.test") + 1] == "--"
    assert not any(
        a.startswith("--label-filter") for a in dry_run_argv(suite, focus="x", label_filter="", report=Path("r"))
    )


def test_narrow() -> None:
    listed = SpecList("d", (ListedSpec("[sig-a] one [Conformance]", ()), ListedSpec("[sig-b] two [Conformance]", ())))
    assert narrow(listed, "") is listed
    assert [s.name for s in narrow(listed, r"\[sig-b\]").specs] == ["[sig-b] two [Conformance]"]
    assert narrow(listed, "three").specs == ()


def test_the_fixture_is_a_real_dry_run_report() -> None:
    data = json.loads(DRY_RUN)
    assert data[0]["SuiteDescription"] == "Kubernetes e2e suite"
    assert {entry["State"] for entry in data[0]["SpecReports"]} == {"passed", "skipped"}
