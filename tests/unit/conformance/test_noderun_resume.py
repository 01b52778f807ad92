"""The node-eviction run in shards that resume: the order of the specs, what a time budget lets start, what a
second command with the same directory runs, and the merged report with its counts per group."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from nodeagent.conformance import build, nodeadapter, noderun, nodesuite, speclist
from nodeagent.conformance.errors import ConformanceError
from nodeagent.conformance.junit import Outcome, SpecResult
from nodeagent.conformance.merge import JUNIT_FILE, junit_xml
from nodeagent.conformance.noderun import NodeRunOptions, SuiteRun, SuiteTarget, node_conformance, report, todo
from nodeagent.conformance.progress import Progress
from nodeagent.conformance.resume import GINKGO_PID_FILE, Attempt, AttemptRecord, attempt_dir
from nodeagent.conformance.shards import Plan, Shard, plan_shards
from nodeagent.conformance.speclist import ListedSpec, SpecList

LISTED = Path(__file__).with_name("testdata") / "e2e_node" / "eviction-neighbourhood.txt"
SELECTION = sorted(
    line.strip()
    for line in LISTED.read_text().splitlines()
    if line.strip() and re.search(nodesuite.NODE_EVICTION.focus, f"E2eNode Suite {line.strip()}")
)
PID_CRI = (
    "[sig-node] PriorityPidEvictionOrdering [Slow] [Serial] [Disruptive] [Feature:Eviction] when we run containers "
    "with PodAndContainerStatsFromCRI=true that should cause PIDPressure  should eventually evict all of the correct "
    "pods"
)
CRITICAL = (
    "[sig-node] CriticalPod [Serial] [Disruptive] [Feature:CriticalPod] when we need to admit a critical pod should "
    "be able to create and delete a critical pod"
)
INODE = (
    "[sig-node] InodeEviction [Slow] [Serial] [Disruptive] [Feature:Eviction] when we run containers that should "
    "cause DiskPressure  should eventually evict all of the correct pods"
)
MEMORY = (
    "[sig-node] PriorityMemoryEvictionOrdering [Slow] [Serial] [Disruptive] [Feature:Eviction] when we run "
    "containers that should cause MemoryPressure  should eventually evict all of the correct pods"
)


def _plan(names: list[str], minutes: float = 45.0) -> Plan:
    """As make_plan cuts it, without the dry run: the specs in RUN_ORDER, one process, shards of `minutes`."""
    specs = SpecList("E2eNode Suite", tuple(ListedSpec(n, ("Serial",)) for n in nodesuite.ordered(names)))
    estimates = {n: nodesuite.estimated_seconds(n) for n in names}
    shards, _ = plan_shards(specs, estimates, procs=1, budget=minutes * 60)
    return Plan("E2eNode Suite", "f", "", "", minutes * 60, shards, "2026-11-29T15:00:00+00:00", "v", "node-eviction")


def _result(name: str, outcome: Outcome, state: str | None = None) -> SpecResult:
    return SpecResult(name, "It", state or outcome.value, outcome, 600.0, "boom" if outcome is Outcome.FAILED else "")


def _attempt(root: Path, shard: int, number: int, results: list[SpecResult] | None) -> Attempt:
    record = AttemptRecord((), 1, "t", "v", 0, 1.0)
    return Attempt(number, attempt_dir(root, shard, number), record, tuple(results) if results is not None else None)


def test_the_selection_is_22_and_memory_comes_last() -> None:
    assert len(SELECTION) == 22
    ordered = nodesuite.ordered(list(reversed(SELECTION)))
    assert sorted(ordered) == SELECTION
    assert ordered[0].startswith("[sig-node] CriticalPod ")
    tests = [nodesuite.spec_test(name) for name in ordered]
    assert set(tests[-4:]) == {
        "MemoryAllocatableEviction",
        "MemoryAllocatableEvictionPodLevelResources",
        "PriorityMemoryEvictionOrdering",
        "PriorityMemoryEvictionOrderingPodLevelResources",
    }
    assert tests.index("PriorityPidEvictionOrdering") < tests.index("InodeEviction")


def test_estimates_measured_then_by_tag() -> None:
    assert nodesuite.estimated_seconds(CRITICAL) == 10.0
    assert nodesuite.estimated_seconds(PID_CRI) == 490.0
    assert nodesuite.estimated_seconds(INODE) == nodesuite.SLOW_SECONDS
    image_gc = next(n for n in SELECTION if "ImageGarbageCollect" in n)
    assert nodesuite.estimated_seconds(image_gc) == 345.0
    assert nodesuite.estimated_seconds("[sig-node] Other [Serial] spec") == nodesuite.OTHER_SECONDS


def test_within_budget_takes_the_prefix_that_fits() -> None:
    seconds = {"a": 100.0, "b": 200.0, "c": 50.0}
    assert nodesuite.within_budget(("a", "b", "c"), seconds, None) == ("a", "b", "c")
    assert nodesuite.within_budget(("a", "b", "c"), seconds, 350) == ("a", "b", "c")
    assert nodesuite.within_budget(("a", "b", "c"), seconds, 299) == ("a",)  # c fits but must not overtake b
    assert nodesuite.within_budget(("a", "b", "c"), seconds, 99) == ()


def test_the_plan_cuts_the_22_into_shards_under_the_budget() -> None:
    plan = _plan(SELECTION)
    assert plan.total == 22
    assert all(shard.procs == 1 for shard in plan.shards)
    assert all(shard.estimate_seconds <= 45 * 60 or len(shard.specs) == 1 for shard in plan.shards)
    assert len(plan.shards) >= 5  # 17 slow specs of 8-12 min do not fit in fewer 45 min shards
    flat = [name for shard in plan.shards for name in shard.specs]
    assert flat == nodesuite.ordered(SELECTION)


def test_todo_skips_ends_and_runs_again_what_has_none(tmp_path: Path) -> None:
    plan = _plan([CRITICAL, PID_CRI, INODE, MEMORY], minutes=30)
    first = plan.shards[0]
    assert first.specs == (CRITICAL, PID_CRI, INODE)  # 1220 s of estimates; the memory spec in a shard of its own
    everything = todo(plan, {}, shard=None, left=None)
    assert [name for _, names in everything for name in names] == [CRITICAL, PID_CRI, INODE, MEMORY]
    # Attempt 1 of shard 1: CriticalPod failed (an end), the next spec interrupted (none), a third a bare skip.
    results = [_result(CRITICAL, Outcome.FAILED)]
    results += [_result(name, Outcome.FAILED, "interrupted") for name in first.specs[1:2]]
    results += [_result(name, Outcome.NOT_SELECTED, "skipped") for name in first.specs[2:]]
    attempts = {first.index: [_attempt(tmp_path, first.index, 1, results)]}
    left = [name for _, names in todo(plan, attempts, shard=None, left=None) for name in names]
    assert left == [PID_CRI, INODE, MEMORY]
    # A killed attempt (no JUnit) ends nothing.
    killed = {first.index: [_attempt(tmp_path, first.index, 1, None)]}
    assert next(n for _, names in todo(plan, killed, shard=None, left=None) for n in names) == CRITICAL
    # --shard K: only that shard.
    last = plan.shards[-1]
    assert todo(plan, attempts, shard=last.index, left=None) == [(last, last.specs)]
    with pytest.raises(ConformanceError):
        todo(plan, attempts, shard=99, left=None)


def names(chosen: list[tuple[Shard, tuple[str, ...]]]) -> list[str]:
    return [n for _, ns in chosen for n in ns]


def test_todo_under_a_time_budget(tmp_path: Path) -> None:
    plan = _plan([CRITICAL, PID_CRI, INODE, MEMORY], minutes=30)
    assert names(todo(plan, {}, shard=None, left=10 * 60)) == [CRITICAL, PID_CRI]  # 10 s + 490 s
    assert names(todo(plan, {}, shard=None, left=25 * 60)) == [CRITICAL, PID_CRI, INODE]
    assert names(todo(plan, {}, shard=None, left=5)) == []


def test_a_second_command_on_the_same_directory_reports_and_resumes(tmp_path: Path) -> None:
    plan = _plan([CRITICAL, PID_CRI, INODE, MEMORY], minutes=30)
    plan.save(tmp_path)
    first = plan.shards[0]
    directory = attempt_dir(tmp_path, first.index, 1)
    directory.mkdir(parents=True)
    (directory / "attempt.json").write_text(AttemptRecord(first.specs, 1, "t", "v", 1, 620.0).to_json())
    (directory / "junit_01.xml").write_text(
        _junit([_result(CRITICAL, Outcome.PASSED), _result(PID_CRI, Outcome.FAILED)])
    )
    text, ok = report(tmp_path)
    assert not ok
    assert text.startswith("node-eviction suite: focus f\n")
    assert "passed 1, failed 1, skipped 0, not run 2 (of 4 specs)" in text
    assert "critical pods" in text  # the counts per group follow the merged report
    assert (tmp_path / "junit_node-eviction.xml").exists() and not (tmp_path / JUNIT_FILE).exists()
    assert (tmp_path / "report.txt").read_text().rstrip("\n") == text
    # The same directory with another focus is refused before anything runs.
    with pytest.raises(ConformanceError, match="holds a plan"):
        asyncio.run(node_conformance(NodeRunOptions(focus="other", dir=tmp_path), Progress()))


def _junit(results: list[SpecResult]) -> str:
    return junit_xml(results, suite_name="E2eNode Suite")


class FakeSuite:
    """Stands in for run_ginkgo (its keywords as run_ginkgo takes them): records each e2e_node.test command, its
    environment and working directory, reports PID 4242 started, and ends it with `code`."""

    def __init__(self) -> None:
        self.code = 0
        self.runs: list[tuple[list[str], dict[str, str], Path | None]] = []

    async def __call__(self, argv: list[str], **kwargs: Any) -> int:
        if (on_start := kwargs.get("on_start")) is not None:
            on_start(4242)
        self.runs.append((argv, kwargs["env"], kwargs.get("cwd")))
        return self.code


@pytest.fixture
def suite(monkeypatch: pytest.MonkeyPatch) -> FakeSuite:
    """noderun's run_ginkgo stood in for, on a disk half free."""
    fake = FakeSuite()
    monkeypatch.setattr(noderun, "run_ginkgo", fake)
    monkeypatch.setattr(noderun, "free_fraction", lambda path: 0.5)
    return fake


def _suite_run(root: Path, plan: Plan, stop: asyncio.Event | None = None) -> SuiteRun:
    target = SuiteTarget("https://198.18.0.1:6443", "tok", root / "containerd.sock", root)
    d = nodeadapter.suite_dir(root / "node-e2e")
    options = NodeRunOptions(dir=root, timeout="3h")
    return SuiteRun(
        plan, root / "e2e_node.test", target, d, root / "repo-list.yaml", options, Progress(), stop or asyncio.Event()
    )


async def test_each_chosen_shard_is_one_attempt_of_the_suite(tmp_path: Path, suite: FakeSuite) -> None:
    plan = _plan([CRITICAL, PID_CRI, INODE, MEMORY], minutes=30)
    plan.save(tmp_path)
    suite.code = 1
    run = _suite_run(tmp_path, plan)
    first, last = plan.shards[0], plan.shards[-1]
    await noderun._shards(run, [(first, (PID_CRI, INODE)), (last, last.specs)], deadline=None)
    assert len(suite.runs) == 2
    argv, env, cwd = suite.runs[0]
    assert f"--ginkgo.focus={speclist.exact_focus(plan.description, (PID_CRI, INODE))}" in argv
    assert "--ginkgo.timeout=3h" in argv and argv[0] == str(tmp_path / "e2e_node.test")
    assert f"--report-dir={attempt_dir(tmp_path, first.index, 1)}" in argv
    assert env["PATH"].startswith(f"{run.d.bin}:") and env["KUBE_TEST_REPO_LIST"] == str(run.repo_list)
    assert cwd == run.d.root
    record = AttemptRecord.from_json((attempt_dir(tmp_path, first.index, 1) / "attempt.json").read_text())
    assert (record.asked, record.exit_code) == ((PID_CRI, INODE), 1)
    assert (attempt_dir(tmp_path, last.index, 1) / GINKGO_PID_FILE).read_text() == "4242\n"
    assert (tmp_path / "report.txt").exists()  # merged after each shard
    # A second command's attempt of the same shard is the next number.
    await noderun._shards(run, [(first, (INODE,))], deadline=None)
    assert f"--report-dir={attempt_dir(tmp_path, first.index, 2)}" in suite.runs[-1][0]


async def test_no_attempt_once_stopped_or_short_of_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suite: FakeSuite
) -> None:
    plan = _plan([CRITICAL, PID_CRI, INODE, MEMORY], minutes=30)
    plan.save(tmp_path)
    stop = asyncio.Event()
    stop.set()
    await noderun._shards(_suite_run(tmp_path, plan, stop), [(plan.shards[0], (CRITICAL,))], deadline=None)
    monkeypatch.setattr(noderun, "free_fraction", lambda path: noderun.MIN_FREE_FRACTION - 0.01)
    await noderun._shards(_suite_run(tmp_path, plan), [(plan.shards[0], (CRITICAL,))], deadline=None)
    assert suite.runs == []


def test_a_time_budget_goes_past_the_shards_that_have_ended(tmp_path: Path) -> None:
    """`--resume DIR --time-budget M` without `--shard`: shard 1 all ended must not stop the run before shard 2."""
    plan = _plan(SELECTION)
    first, second = plan.shards[0], plan.shards[1]
    ended = {first.index: [_attempt(tmp_path, first.index, 1, [_result(n, Outcome.PASSED) for n in first.specs])]}
    budget = 25 * 60
    expected = nodesuite.within_budget(second.specs, {n: nodesuite.estimated_seconds(n) for n in second.specs}, budget)
    assert expected  # shard 2's first spec fits in 25 min
    assert todo(plan, ended, shard=None, left=budget) == [(second, expected)]
    # The same with no budget, and with --shard: what `--shard K` always did.
    assert todo(plan, ended, shard=None, left=None)[0] == (second, second.specs)
    assert todo(plan, ended, shard=second.index, left=budget) == [(second, expected)]


def test_a_time_budget_lets_no_later_spec_overtake_one_it_cut(tmp_path: Path) -> None:
    """Shard 1's next spec does not fit what is left; shard 2's short one would, but runs only after it."""
    plan = _plan([CRITICAL, PID_CRI, INODE, MEMORY], minutes=30)
    shards = (
        dataclasses.replace(plan.shards[0], specs=(PID_CRI, INODE)),
        dataclasses.replace(plan.shards[1], specs=(CRITICAL, MEMORY)),
    )
    plan = dataclasses.replace(plan, shards=shards)
    # PID_CRI is 490 s; INODE (720 s) does not fit the 110 s left, so CRITICAL (10 s) waits too.
    assert names(todo(plan, {}, shard=None, left=10 * 60)) == [PID_CRI]


async def test_a_resumed_command_with_a_time_budget_runs_the_next_pending_specs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = _plan(SELECTION)
    plan.save(tmp_path)
    first, second = plan.shards[0], plan.shards[1]
    directory = attempt_dir(tmp_path, first.index, 1)
    directory.mkdir(parents=True)
    (directory / "attempt.json").write_text(AttemptRecord(first.specs, 1, "t", "v", 0, 600.0).to_json())
    (directory / "junit_01.xml").write_text(_junit([_result(n, Outcome.PASSED) for n in first.specs]))
    ran: list[list[tuple[Shard, tuple[str, ...]]]] = []

    async def fake_run(plan: Plan, chosen: list[tuple[Shard, tuple[str, ...]]], **_: object) -> None:
        ran.append(chosen)

    monkeypatch.setattr(noderun, "_run", fake_run)
    monkeypatch.setattr(build, "build_e2e_node", lambda progress: tmp_path / "e2e_node.test")
    options = NodeRunOptions(dir=tmp_path, time_budget_minutes=25)
    assert await node_conformance(options, Progress(write=lambda line: None)) == 1  # specs still not run
    (chosen,) = ran
    assert [shard.index for shard, _ in chosen] == [second.index]
    assert chosen[0][1][0] == second.specs[0]


async def test_the_time_left_is_checked_before_each_shard(tmp_path: Path, suite: FakeSuite) -> None:
    plan = _plan([CRITICAL, PID_CRI, INODE, MEMORY], minutes=30)
    plan.save(tmp_path)
    first, last = plan.shards[0], plan.shards[-1]
    chosen = [(first, (PID_CRI, INODE)), (last, (CRITICAL,))]
    now = [0.0]
    # 1000 s left when shard 1 starts: PID_CRI (490 s) fits, INODE (720 s) does not, and CRITICAL must wait for it.
    await noderun._shards(_suite_run(tmp_path, plan), chosen, deadline=1000.0, clock=lambda: now[0])
    record = AttemptRecord.from_json((attempt_dir(tmp_path, first.index, 1) / "attempt.json").read_text())
    assert record.asked == (PID_CRI,) and len(suite.runs) == 1
    # Too little left for the first spec: no attempt at all.
    now[0] = 600.0
    await noderun._shards(_suite_run(tmp_path, plan), chosen, deadline=1000.0, clock=lambda: now[0])
    assert len(suite.runs) == 1
    # Enough for all: both shards.
    await noderun._shards(_suite_run(tmp_path, plan), chosen, deadline=1e6, clock=lambda: now[0])
    assert len(suite.runs) == 3
