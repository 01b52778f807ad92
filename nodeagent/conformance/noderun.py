"""`nodeagent conformance --suite node-eviction`: upstream's node e2e eviction specs against a testbed's agent.

The 22 specs take hours one after the other, so a run is a directory that later commands go on with, as
`--certified`'s is (shards.py, resume.py, merge.py):
  plan.json      the selection (a dry run of e2e_node.test), in nodesuite.RUN_ORDER, cut into shards of about
                 `--shard-minutes` (every spec is [Serial]: one process); never rewritten
  shards/NN/attempt-M/   one e2e_node.test run of shard NN: junit_01.xml, ginkgo.log, attempt.json, ginkgo.pid
  report.txt, junit_node-eviction.xml   the attempts merged (latest end per spec) with the counts per group
  testbed/       the testbed, without node-condition taints (`Testbed(node_condition_taints=False)`: a not-ready or
                 memory-pressure taint hides the node from the suite); brought up by each command that has specs
                 to run, and down at its end unless --keep
  node-e2e/      the suite's working directory (`nodeadapter.prepare`): kubelet-config, bin/{sudo,systemctl},
                 shim.json, systemctl.log
  repo-list.yaml, images.txt   as for e2e.test (harness.py)

Running the command again with the same `--dir` (or `--resume DIR`) runs only the specs with no end yet (a
failure is an end); `--shard K` only shard K; `--time-budget M` starts the specs with no end yet in the plan's
order, passing over shards that have ended, until the next one's estimate does not fit in M minutes from the
command's start; `--report DIR` prints the merged report. The agent is started through the shim
(`systemctl start`), as the suite later restarts it. docs/conformance.md, "node-eviction suite", has the design and
the results.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nodeagent.conformance import build, loopbackforward, nodeadapter, nodesuite, repolist, speclist
from nodeagent.conformance.certified import check_focus, run_lock, version_text
from nodeagent.conformance.errors import ConformanceError
from nodeagent.conformance.harness import prepare_images, run_dir, stop_event
from nodeagent.conformance.junit import Outcome
from nodeagent.conformance.merge import merge, write_report
from nodeagent.conformance.presets import format_group_counts, group_counts
from nodeagent.conformance.progress import Progress
from nodeagent.conformance.resume import (
    GINKGO_PID_FILE,
    Attempt,
    AttemptRecord,
    attempt_dir,
    missing,
    next_attempt,
    read_attempts,
    running_ginkgo,
)
from nodeagent.conformance.run import run_ginkgo
from nodeagent.conformance.shards import PLAN_FILE, Plan, Shard, format_plan, plan_shards
from nodeagent.conformance.systemctl_shim import Kubelet
from nodeagent.kuberuntime.cgroups import remove_cgroup_tree
from nodeagent.testbed import install as installer
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import kubernetes_bin_dir

DEFAULT_TIMEOUT = "4h"  # 22 specs of 10-15 min each, run one after the other


MIN_FREE_FRACTION = 0.20  # of the run directory's filesystem; the imagefs threshold (15 %) evicts every pod below it


@dataclass(frozen=True)
class NodeRunOptions:
    focus: str | None = None  # a narrower focus plans some of the selection; None: the selection's, or the plan's
    dir: Path | None = None
    kubelet: Kubelet = Kubelet.NODEAGENT
    timeout: str = DEFAULT_TIMEOUT
    keep: bool = False
    shard: int | None = None  # only this shard of the plan
    shard_minutes: float = 45.0  # a new plan's shards are cut to this estimate
    time_budget_minutes: float | None = None  # start only the specs whose estimates fit in this, from the start
    report_only: bool = False

    @property
    def new_plan_focus(self) -> str:
        """The focus a new plan lists: the given one, else the whole selection's."""
        return self.focus if self.focus is not None else nodesuite.NODE_EVICTION.focus


@dataclass(frozen=True)
class SuiteTarget:
    """Where the suite finds the cluster and the node."""

    apiserver_url: str
    token: str
    containerd_socket: Path
    report_dir: Path


@dataclass(frozen=True)
class SuiteRun:
    """What every attempt of one command shares: the plan, the suite's binary, where it finds the cluster and the
    node, its working directory and repo list, the command's options and output, and the stop its signals set."""

    plan: Plan
    binary: Path
    target: SuiteTarget
    d: nodeadapter.SuiteDir
    repo_list: Path
    options: NodeRunOptions
    progress: Progress
    stop: asyncio.Event


def suite_argv(binary: Path, target: SuiteTarget, *, focus: str, timeout: str) -> list[str]:
    """`e2e_node.test` against an external apiserver (no services of its own), verbose, one process."""
    return [
        str(binary),
        f"--ginkgo.focus={focus}",
        f"--ginkgo.timeout={timeout}",
        "--ginkgo.v",
        "--ginkgo.no-color",
        "--ginkgo.silence-skips",
        "--start-services=false",
        f"--host={target.apiserver_url}",
        f"--bearer-token={target.token}",
        f"--container-runtime-endpoint=unix://{target.containerd_socket}",
        # The testbed's registry serves the suite's images by name (KUBE_TEST_REPO_LIST); they are pulled as needed.
        "--prepull-images=false",
        f"--report-dir={target.report_dir}",
    ]


def suite_env(d: nodeadapter.SuiteDir, repo_list: Path, base: dict[str, str]) -> dict[str, str]:
    env = dict(base)
    env["PATH"] = nodeadapter.suite_path(d, base.get("PATH", ""))
    env["KUBE_TEST_REPO_LIST"] = str(repo_list)
    env.pop("KUBECONFIG", None)  # node e2e mode ignores it; no confusion with the admin's
    return env


def _shim(d: nodeadapter.SuiteDir, *args: str) -> None:
    proc = subprocess.run(
        [str(d.bin / "systemctl"), *args], capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        raise ConformanceError(f"systemctl {' '.join(args)} (the shim): exit {proc.returncode}: {proc.stdout.strip()}")


def free_fraction(path: Path) -> float:
    """The share of `path`'s filesystem that is free to an unprivileged writer, as the kubelet's stats count it."""
    st = os.statvfs(path)
    return st.f_bavail / st.f_blocks if st.f_blocks else 0.0


async def make_plan(binary: Path, focus: str, root: Path, shard_minutes: float, progress: Progress) -> Plan:
    """The selection by a dry run (no cluster), in RUN_ORDER, cut into one-process shards of the estimates."""
    suite = build.Suite(e2e_test=binary, ginkgo=await asyncio.to_thread(build.build_ginkgo, progress))
    args = nodesuite.DRY_RUN_SUITE_ARGS
    listed = await speclist.list_specs(suite, focus=focus, label_filter="", work_dir=root, suite_args=args)
    if not listed.specs:
        raise ConformanceError(f"no spec of e2e_node.test matches the focus {focus!r}")
    by_name = {spec.name: spec for spec in listed.specs}
    specs = speclist.SpecList(listed.description, tuple(by_name[name] for name in nodesuite.ordered(list(by_name))))
    estimates = {name: nodesuite.estimated_seconds(name) for name in by_name}
    shards, _ = plan_shards(specs, estimates, procs=1, budget=shard_minutes * 60)
    plan = Plan(
        description=listed.description,
        focus=focus,
        label_filter="",
        narrow="",
        budget_seconds=shard_minutes * 60,
        shards=shards,
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        version=version_text(),
        suite=nodesuite.NODE_EVICTION.name,
    )
    await check_focus(suite, plan, root, suite_args=args)
    return plan


def todo(
    plan: Plan, attempts: dict[int, list[Attempt]], *, shard: int | None, left: float | None
) -> list[tuple[Shard, tuple[str, ...]]]:
    """Each selected shard with its specs that have no end yet, cut to the time `left` (seconds; None: no limit):
    the specs, in the plan's order, whose estimates add up to no more than that. A shard whose specs all have an
    end is passed over, as `--certified` does; the first spec that does not fit ends the list, so that no later
    spec overtakes it."""
    shards = [plan.shard(shard)] if shard is not None else list(plan.shards)
    chosen: list[tuple[Shard, tuple[str, ...]]] = []
    for one in shards:
        pending = missing(one, attempts.get(one.index, ()))
        names = pending
        if left is not None:
            names = nodesuite.within_budget(pending, {n: nodesuite.estimated_seconds(n) for n in pending}, left)
            left -= sum(nodesuite.estimated_seconds(n) for n in names)
        if names:
            chosen.append((one, names))
        if names != pending:
            break  # the budget cut this shard short
    return chosen


def report(root: Path) -> tuple[str, bool]:
    """The merged report of the run in `root` with the counts per group, written there; and whether every planned
    spec passed."""
    plan = Plan.load(root)
    merged = merge(plan, {shard.index: read_attempts(root, shard.index) for shard in plan.shards})
    text = write_report(root, merged)
    text += "\n\n" + format_group_counts(group_counts(nodesuite.NODE_EVICTION, merged.results))
    (root / "report.txt").write_text(text + "\n")
    failed = any(result.outcome is Outcome.FAILED for result in merged.results)
    return text, merged.complete and not failed and not merged.suite_failures


def _check_running(plan: Plan, attempts: dict[int, list[Attempt]]) -> None:
    for index, tried in attempts.items():
        for attempt in tried:
            if (pid := running_ginkgo(attempt)) is not None:
                raise ConformanceError(
                    f"shard {index}'s attempt {attempt.number} is still running (e2e_node.test PID {pid}; its "
                    f"driver was killed): wait for it, or interrupt it with `kill -INT -- -{pid}`, then run again"
                )


async def node_conformance(options: NodeRunOptions, progress: Progress | None = None) -> int:
    """The whole command; 0 when every planned spec passed."""
    progress = progress or Progress()
    started = time.monotonic()
    root = run_dir(options.dir)
    if options.report_only:
        text, ok = await asyncio.to_thread(report, root)
        progress.write(text)
        return 0 if ok else 1
    with run_lock(root):
        progress.step(f"run directory {root}")
        if (root / PLAN_FILE).exists():
            plan = Plan.load(root)
            if options.focus is not None and options.focus != plan.focus:
                raise ConformanceError(
                    f"{root} holds a plan with focus {plan.focus!r}: resume it without --focus, or use a new --dir"
                )
            progress.step(f"resuming the plan of {plan.created}")
        else:
            binary = await asyncio.to_thread(build.build_e2e_node, progress)
            plan = await make_plan(binary, options.new_plan_focus, root, options.shard_minutes, progress)
            plan.save(root)
        progress.write(format_plan(plan).replace("certified plan", f"{plan.suite} plan"))
        attempts = {shard.index: await asyncio.to_thread(read_attempts, root, shard.index) for shard in plan.shards}
        _check_running(plan, attempts)
        budget = None if options.time_budget_minutes is None else options.time_budget_minutes * 60
        chosen = todo(plan, attempts, shard=options.shard, left=budget)
        if chosen:
            binary = await asyncio.to_thread(build.build_e2e_node, progress)  # cached: found at once
            await _run(
                plan,
                chosen,
                binary=binary,
                root=root,
                options=options,
                progress=progress,
                deadline=None if budget is None else started + budget,
            )
        else:
            progress.step(
                "nothing to run: every selected spec has an end, or the next one's estimate exceeds the budget"
            )
        text, ok = await asyncio.to_thread(report, root)
        progress.write(text)
        progress.step(f"report: {root / 'report.txt'}; print it again: nodeagent conformance --suite "
                      f"{plan.suite} --report {root}")  # fmt: skip
        return 0 if ok else 1


async def _run(
    plan: Plan,
    chosen: list[tuple[Shard, tuple[str, ...]]],
    *,
    binary: Path,
    root: Path,
    options: NodeRunOptions,
    progress: Progress,
    deadline: float | None,
) -> None:
    """Bring the testbed up, run each chosen shard's specs as one attempt, bring it down."""
    nodeadapter.check_ports()
    await asyncio.to_thread(installer.install)
    bed = Testbed(root / "testbed", node_condition_taints=False)
    try:
        progress.step(
            f"testbed: up in {bed.layout.root} (no node-condition taints: controller-manager without "
            "node-lifecycle-controller, apiserver without TaintNodesByCondition)"
        )
        up_started = time.monotonic()
        settings = await bed.up()
        d = nodeadapter.prepare(
            root / "node-e2e",
            testbed_root=bed.layout.root,
            agent_config=bed.layout.agent_config,
            kubelet=options.kubelet,
        )
        await asyncio.to_thread(_shim, d, "start", "kubelet-nodeagent")
        progress.step(
            f"testbed: {options.kubelet.value} started through the shim, node {settings.node_name} Ready in "
            f"{time.monotonic() - up_started:.0f}s"
        )
        kubectl = kubernetes_bin_dir() / "kubectl"
        token = await asyncio.to_thread(nodeadapter.bearer_token, kubectl, bed.layout.admin_kubeconfig)
        repo_list = repolist.write_repo_list(root / "repo-list.yaml", settings.registry)
        await prepare_images(binary, repo_list, settings.registry, root, progress=progress)
        stop = stop_event()
        async with contextlib.AsyncExitStack() as stack:
            if (read_only := nodeadapter.read_only_target(d)) is not None:
                loopback = ("127.0.0.1", nodeadapter.READ_ONLY_PORT)
                await stack.enter_async_context(loopbackforward.forward(loopback, read_only))
                progress.step(f"metrics: 127.0.0.1:{loopback[1]} forwarded to the node's {read_only[0]}:{read_only[1]}")
            target = SuiteTarget(settings.apiserver_url, token, bed.layout.containerd_socket, root)
            run = SuiteRun(plan, binary, target, d, repo_list, options, progress, stop)
            await _shards(run, chosen, deadline=deadline)
    finally:
        if options.keep:
            progress.step(
                f"testbed kept: . {bed.layout.env_file}; down: nodeagent testbed down --dir {bed.layout.root}"
            )
        else:
            progress.step("testbed: down")
            await _down(bed, options.kubelet)


async def _shards(
    run: SuiteRun,
    chosen: list[tuple[Shard, tuple[str, ...]]],
    *,
    deadline: float | None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Each chosen shard's specs as one attempt, while time, disk and the user allow. The time left is checked again
    before each shard (the testbed took some); a shard it cuts short is the last one, as in `todo`."""
    progress, target = run.progress, run.target
    for shard, planned in chosen:
        specs = planned
        if run.stop.is_set():
            break
        if deadline is not None:
            left = deadline - clock()
            specs = nodesuite.within_budget(specs, {n: nodesuite.estimated_seconds(n) for n in specs}, left)
            if not specs:
                progress.step(f"time budget: {left / 60:.0f} min left, too little for shard {shard.index}'s next spec")
                break
        free = free_fraction(target.report_dir)
        if free < MIN_FREE_FRACTION:
            progress.step(
                f"disk: {free:.0%} of {target.report_dir}'s filesystem is free, under {MIN_FREE_FRACTION:.0%}: no "
                "further attempt (the testbed's imagefs threshold of 15 % would evict the pods)"
            )
            break
        await _attempt(run, shard, specs)
        await asyncio.to_thread(report, target.report_dir)  # after every shard: a run killed later keeps what ended
        if specs != planned:
            progress.step(
                f"time budget: shard {shard.index}'s other {len(planned) - len(specs)} spec(s) did not fit; no later "
                "shard starts before them"
            )
            break


async def _attempt(run: SuiteRun, shard: Shard, specs: tuple[str, ...]) -> None:
    progress, target = run.progress, run.target
    root = target.report_dir
    number = next_attempt(await asyncio.to_thread(read_attempts, root, shard.index))
    report_dir = attempt_dir(root, shard.index, number)
    report_dir.mkdir(parents=True)
    record = AttemptRecord(
        asked=specs,
        procs=1,
        started=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        version=version_text(),
    )
    (report_dir / "attempt.json").write_text(record.to_json())
    focus = speclist.exact_focus(run.plan.description, specs)
    argv = suite_argv(
        run.binary, dataclasses.replace(target, report_dir=report_dir), focus=focus, timeout=run.options.timeout
    )
    progress.step(f"{shard.label}: attempt {number}, {len(specs)} specs, output in {report_dir / 'ginkgo.log'}")
    started = time.monotonic()
    code = await run_ginkgo(
        argv,
        env=suite_env(run.d, run.repo_list, dict(os.environ)),
        log_path=report_dir / "ginkgo.log",
        show=progress.write,
        stop=run.stop,
        on_start=lambda pid: _write_pid(report_dir, pid),
        cwd=run.d.root,
    )
    seconds = time.monotonic() - started
    (report_dir / "attempt.json").write_text(
        dataclasses.replace(record, exit_code=code, seconds=round(seconds, 1)).to_json()
    )
    progress.step(f"shard {shard.index}: e2e_node.test exit {code} after {seconds / 60:.1f} min")


def _write_pid(report_dir: Path, pid: int) -> None:
    (report_dir / GINKGO_PID_FILE).write_text(f"{pid}\n")


async def _down(bed: Testbed, kubelet: Kubelet) -> None:
    if kubelet is Kubelet.UPSTREAM:
        from nodeagent.testbed import upstreamkubelet  # noqa: PLC0415

        running = upstreamkubelet.running_kubelet(bed)
        if running is not None:
            await upstreamkubelet.stop_kubelet(running)
    await bed.down()
    # `cgroupRoot: /` put the QoS tree at /kubepods; the testbed removes only its own cgroup root.
    await asyncio.to_thread(remove_cgroup_tree, nodeadapter.KUBEPODS_CGROUP)
