"""`nodeagent conformance --certified`: the certified suite (focus `[Conformance]`, no skip) in shards that resume.

The whole suite takes hours on two cores, so a run is a directory that outlives any one process:
  plan.json          the specs (a ginkgo dry run) cut into shards of about 45 minutes (shards.py); never rewritten
  target.json        the cluster the shards run against: its admin kubeconfig and the registry the images come from
  repo-list.yaml     KUBE_TEST_REPO_LIST; images.txt: the suite's images the registry has and lacks
  shards/NN/attempt-M/   one ginkgo run of shard NN: junit_01.xml, ginkgo.log, attempt.json (resume.py)
  report.txt, junit_certified.xml   the shards merged (merge.py), rewritten after every shard

`--resume DIR` runs, shard by shard, only the specs that have no end yet; `--shard K` only shard K; `--report DIR`
prints the merged report without running anything. One SIGINT or SIGTERM interrupts the running shard (ginkgo
cleans up and writes its report), runs no further shard, and still writes the merged report.

The cluster is not brought up here: it must outlive the runs that resume it. It is `nodeagent cluster up` (`--cluster
DIR`, its kubeconfig and registry read from its state) or any cluster given by `--kubeconfig` (with `--registry`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import fcntl
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nodeagent.cluster.cluster import STATE_FILE as CLUSTER_STATE_FILE
from nodeagent.cluster.cluster import Cluster, ClusterError
from nodeagent.conformance import build, junit, repolist, speclist
from nodeagent.conformance.errors import ConformanceError
from nodeagent.conformance.harness import DEFAULT_ROOT, prepare_images, stop_event
from nodeagent.conformance.merge import merge, write_report
from nodeagent.conformance.progress import Progress
from nodeagent.conformance.resume import (
    GINKGO_PID_FILE,
    AttemptRecord,
    attempt_dir,
    missing,
    next_attempt,
    read_attempts,
    running_ginkgo,
)
from nodeagent.conformance.run import DEFAULT_TIMEOUT, RunOptions, ginkgo_argv, run_ginkgo
from nodeagent.conformance.shards import (
    PLAN_FILE,
    Plan,
    Shard,
    format_plan,
    plan_shards,
    recorded_durations,
    shipped_durations,
)
from nodeagent.testbed import install as installer
from nodeagent.testbed.versions import KUBERNETES_VERSION, kubernetes_bin_dir
from nodeagent.version import NODEAGENT_VERSION

TARGET_FILE = "target.json"
DEFAULT_CLUSTER = Path("/var/tmp/nodeagent-cluster")  # `nodeagent cluster up`'s default directory


@dataclass(frozen=True)
class CertifiedOptions:
    dir: Path | None  # a new run's directory (default: a new one under DEFAULT_ROOT)
    resume: Path | None = None  # an existing run to go on with
    report_only: Path | None = None  # an existing run whose merged report to print
    shard: int | None = None
    kubeconfig: Path | None = None
    registry: str | None = None
    cluster: Path | None = None
    procs: int = 2
    provider: str = "skeleton"
    timeout: str = DEFAULT_TIMEOUT
    budget_minutes: float = 45.0
    durations: tuple[Path, ...] = ()  # JUnit reports (files or directories) whose times the plan uses
    narrow: str = ""  # a Python regex on the spec's text that keeps only some certified specs
    label_filter: str = ""


@dataclass(frozen=True)
class Target:
    kubeconfig: Path
    registry: str | None
    source: str

    def save(self, root: Path) -> None:
        data = {"kubeconfig": str(self.kubeconfig), "registry": self.registry, "source": self.source}
        (root / TARGET_FILE).write_text(json.dumps(data, indent=1) + "\n")

    @classmethod
    def load(cls, root: Path) -> Target | None:
        path = root / TARGET_FILE
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        return cls(Path(data["kubeconfig"]), data.get("registry"), str(data.get("source", "")))


def cluster_target(cluster_dir: Path) -> Target:
    cluster = Cluster(cluster_dir)
    try:
        state = cluster.state()
    except (OSError, ValueError, KeyError, ClusterError) as exc:
        raise ConformanceError(
            f"no cluster in {cluster_dir} ({exc}): bring one up with `nodeagent cluster up --nodes N --dir "
            f"{cluster_dir}`, or give --kubeconfig"
        ) from exc
    return Target(cluster.admin_kubeconfig, state.registry, f"nodeagent cluster {cluster_dir}")


def resolve_target(options: CertifiedOptions, root: Path) -> Target:
    """--kubeconfig, else --cluster, else the run's saved target (a resumed run), else the default cluster."""
    if options.kubeconfig is not None:
        return Target(options.kubeconfig.resolve(), options.registry, "--kubeconfig")
    if options.cluster is not None:
        return cluster_target(options.cluster.resolve())
    saved = Target.load(root)
    if saved is not None:
        return saved
    if (DEFAULT_CLUSTER / CLUSTER_STATE_FILE).exists():
        return cluster_target(DEFAULT_CLUSTER)
    raise ConformanceError(
        "no cluster to run against: `nodeagent cluster up --nodes 3` first (or --cluster DIR), or give --kubeconfig"
    )


def version_text() -> str:
    """nodeagent's version and commit, and the suite's release: what a result is quoted with."""
    commit = "unknown commit"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            ["git", "-C", str(Path(__file__).resolve().parent), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if done.returncode == 0 and done.stdout.strip():
            commit = f"commit {done.stdout.strip()}"
    return f"nodeagent {NODEAGENT_VERSION} ({commit}), e2e.test {KUBERNETES_VERSION}"


@contextlib.contextmanager
def run_lock(root: Path) -> Iterator[None]:
    """One process per run directory: two would run the same shard's next attempt at once."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise ConformanceError(f"another `nodeagent conformance` run is going on in {root}") from exc
        yield


def _durations(paths: tuple[Path, ...]) -> dict[str, float]:
    recorded = shipped_durations()
    for path in paths:
        files = sorted(path.rglob("junit_*.xml")) if path.is_dir() else [path]
        for file in files:
            recorded.update(recorded_durations(junit.parse_junit(file.read_text(errors="replace"))))
    return recorded


async def make_plan(suite: build.Suite, options: CertifiedOptions, root: Path, progress: Progress) -> Plan:
    listed = await speclist.list_specs(
        suite, focus=speclist.CERTIFIED_FOCUS, label_filter=options.label_filter, work_dir=root
    )
    progress.step(f"plan: the dry run lists {len(listed.specs)} certified specs")
    specs = speclist.narrow(listed, options.narrow)
    if not specs.specs:
        raise ConformanceError(f"no certified spec matches {options.narrow!r}")
    shards, _ = plan_shards(
        specs, _durations(options.durations), procs=options.procs, budget=options.budget_minutes * 60
    )
    plan = Plan(
        description=specs.description,
        focus=speclist.CERTIFIED_FOCUS,
        label_filter=options.label_filter,
        narrow=options.narrow,
        budget_seconds=options.budget_minutes * 60,
        shards=shards,
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        version=version_text(),
    )
    await check_focus(suite, plan, root)
    return plan


async def check_focus(
    suite: build.Suite, plan: Plan, root: Path, suite_args: tuple[str, ...] = speclist.E2E_SUITE_ARGS
) -> None:
    """Each shard's focus selects exactly its specs (a dry run each, 2 s): a spec that a focus missed or added would
    go unnoticed until the merged report counts it as not run."""
    for shard in plan.shards:
        focus = speclist.exact_focus(plan.description, shard.specs)
        selected = await speclist.list_specs(suite, focus=focus, label_filter="", work_dir=root, suite_args=suite_args)
        names = {spec.name for spec in selected.specs}
        if names != set(shard.specs):
            raise ConformanceError(
                f"shard {shard.index}'s focus selects {len(names)} specs, not its {len(shard.specs)}: "
                f"missing {sorted(set(shard.specs) - names)[:3]}, extra {sorted(names - set(shard.specs))[:3]}"
            )


async def _run_shard(
    suite: build.Suite,
    shard: Shard,
    specs: tuple[str, ...],
    *,
    plan: Plan,
    root: Path,
    target: Target,
    repo_list: Path | None,
    options: CertifiedOptions,
    progress: Progress,
    stop: asyncio.Event,
) -> None:
    number = next_attempt(await asyncio.to_thread(read_attempts, root, shard.index))
    report_dir = attempt_dir(root, shard.index, number)
    report_dir.mkdir(parents=True)
    record = AttemptRecord(
        asked=specs,
        procs=shard.procs,
        started=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        version=version_text(),
    )
    (report_dir / "attempt.json").write_text(record.to_json())
    run_options = RunOptions(
        kubeconfig=target.kubeconfig,
        report_dir=report_dir,
        focus=speclist.exact_focus(plan.description, specs),
        skip="",  # certification skips nothing: [Serial] and [Disruptive] included
        procs=shard.procs,
        provider=options.provider,
        timeout=options.timeout,
        repo_list=repo_list,
        kubectl=kubernetes_bin_dir() / "kubectl",
    )
    env = dict(os.environ)
    env["KUBECONFIG"] = str(target.kubeconfig)
    if repo_list is not None:
        env["KUBE_TEST_REPO_LIST"] = str(repo_list)
    progress.step(f"{shard.label}: attempt {number}, {len(specs)} specs, output in {report_dir / 'ginkgo.log'}")
    started = time.monotonic()
    code = await run_ginkgo(
        ginkgo_argv(suite, run_options),
        env=env,
        log_path=report_dir / "ginkgo.log",
        show=progress.write,
        stop=stop,
        on_start=lambda pid: _write_pid(report_dir, pid),
    )
    seconds = time.monotonic() - started
    ended = dataclasses.replace(record, exit_code=code, seconds=round(seconds, 1))
    (report_dir / "attempt.json").write_text(ended.to_json())
    progress.step(f"shard {shard.index}: ginkgo exit {code} after {seconds / 60:.1f} min")


def _write_pid(report_dir: Path, pid: int) -> None:
    (report_dir / GINKGO_PID_FILE).write_text(f"{pid}\n")


def report(root: Path) -> tuple[str, bool]:
    """The merged report of the run in `root`, written there; and whether every planned spec passed or skipped."""
    plan = Plan.load(root)
    merged = merge(plan, {shard.index: read_attempts(root, shard.index) for shard in plan.shards})
    text = write_report(root, merged)
    failed = any(result.outcome is junit.Outcome.FAILED for result in merged.results)
    return text, merged.complete and not failed and not merged.suite_failures


async def certified(options: CertifiedOptions, progress: Progress | None = None) -> int:
    """The whole command; 0 when every planned spec has passed (or skipped itself), 1 otherwise."""
    progress = progress or Progress()
    if options.report_only is not None:
        text, ok = await asyncio.to_thread(report, options.report_only.resolve())
        progress.write(text)
        return 0 if ok else 1
    root = (options.resume or options.dir or DEFAULT_ROOT / f"certified-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    with run_lock(root):
        progress.step(f"certified run directory {root}")
        # The certified specs' own images (httpd, jessie-dnsutils, sample-apiserver, etcd, agnhost with dig) are
        # built from parts only this install brings; a plain install would leave them lacking in images.txt.
        await asyncio.to_thread(installer.install, with_certified=True)
        suite = await asyncio.to_thread(build.ensure_suite, progress)
        if options.resume is not None:
            plan = Plan.load(root)
        elif (root / PLAN_FILE).exists():
            raise ConformanceError(f"{root} holds a certified run already: `--resume {root}` goes on with it")
        else:
            plan = await make_plan(suite, options, root, progress)
            plan.save(root)
        progress.write(format_plan(plan))
        shards = [plan.shard(options.shard)] if options.shard is not None else list(plan.shards)
        attempts = {shard.index: await asyncio.to_thread(read_attempts, root, shard.index) for shard in plan.shards}
        for index, tried in attempts.items():
            for attempt in tried:
                if (pid := running_ginkgo(attempt)) is not None:
                    raise ConformanceError(
                        f"shard {index}'s attempt {attempt.number} is still running (ginkgo PID {pid}; its driver "
                        f"was killed): wait for it, or interrupt it with `kill -INT -- -{pid}`, then resume"
                    )
        todo = [(shard, missing(shard, attempts[shard.index])) for shard in shards]
        todo = [(shard, specs) for shard, specs in todo if specs]
        if todo:
            try:
                target = resolve_target(options, root)
            except ConformanceError as exc:
                # A new run's plan is saved already: it is a preview, and the run goes on from it once a cluster is up.
                raise ConformanceError(f"{exc}; the plan is saved: then `--resume {root}`") from exc
            target.save(root)
            progress.step(f"cluster: {target.source}, KUBECONFIG={target.kubeconfig}")
            repo_list = None
            if target.registry is None:
                progress.step(
                    "images: no registry: the suite pulls from upstream's registries, which are not reachable"
                )
            else:
                repo_list = repolist.write_repo_list(root / "repo-list.yaml", target.registry)
                await prepare_images(suite.e2e_test, repo_list, target.registry, root, progress=progress)
            stop = stop_event()
            for shard, specs in todo:
                if stop.is_set():
                    break
                await _run_shard(
                    suite,
                    shard,
                    specs,
                    plan=plan,
                    root=root,
                    target=target,
                    repo_list=repo_list,
                    options=options,
                    progress=progress,
                    stop=stop,
                )
                await asyncio.to_thread(
                    report, root
                )  # after every shard, so a run killed later still leaves the report of what ended
        else:
            progress.step("nothing left to run: every planned spec of the selected shards has an end")
        text, ok = await asyncio.to_thread(report, root)
        progress.write(text)
        progress.step(f"report: {root / 'report.txt'}; print it again: nodeagent conformance --report {root}")
        return 0 if ok else 1
