"""`nodeagent conformance`: build the suite, bring up a cluster whose only node is nodeagent, run, summarise.

Under the run's directory (`--dir`, default a new one under /var/lib/nodeagent/conformance):
  testbed/          the testbed, when none is given by --kubeconfig (brought down at the end unless --keep)
  repo-list.yaml    KUBE_TEST_REPO_LIST: upstream's registries mapped to the testbed's registry
  report/           junit_01.xml (the framework's), ginkgo.log (the whole output), summary.txt, images.txt (the
                    suite's images: have / lack / invalid), images-pulled.txt (what the node holds after the run)
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from nodeagent.cluster.cluster import Cluster, ClusterError
from nodeagent.conformance import build, images, junit, repolist, summary
from nodeagent.conformance.errors import ConformanceError
from nodeagent.conformance.presets import Preset, format_group_counts, group_counts, missing_api_versions
from nodeagent.conformance.progress import Progress
from nodeagent.conformance.run import RunOptions, ginkgo_argv, run_ginkgo
from nodeagent.testbed import install as installer
from nodeagent.testbed.kubectl import KubectlError, kubectl
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import kubernetes_bin_dir

DEFAULT_ROOT = Path("/var/lib/nodeagent/conformance")


@dataclass(frozen=True)
class HarnessOptions:
    focus: str
    skip: str
    procs: int
    provider: str
    timeout: str
    dir: Path | None = None
    kubeconfig: Path | None = None
    cluster: Path | None = None  # the `nodeagent cluster up` directory kubeconfig and registry were read from
    registry: str | None = None  # the registry the repo list points at, for a cluster given by kubeconfig
    keep: bool = False
    expected_specs: int = 0  # a fixed subset: exactly this many specs must run (0: any number)
    label_filter: str = ""  # ginkgo v2's --label-filter
    preset: Preset | None = None  # a named selection: its summary counts each of its groups


def run_dir(given: Path | None) -> Path:
    if given is not None:
        return given.resolve()
    return DEFAULT_ROOT / time.strftime("%Y%m%d-%H%M%S")


async def conformance(options: HarnessOptions, progress: Progress | None = None) -> int:
    """The whole command; 0 when every selected spec passed (or skipped itself), 1 otherwise."""
    progress = progress or Progress()
    root = run_dir(options.dir)
    report_dir = root / "report"
    report_dir.mkdir(parents=True, exist_ok=True)
    for stale in report_dir.glob("junit_*.xml"):  # a run that writes no report must not be read as the last one's
        stale.unlink()
    progress.step(f"run directory {root}")
    # As `nodeagent up`: whatever of the testbed is missing first (idempotent; seconds when all is there). The e2e
    # build takes its replace lines from the control plane's build module, and the run uses its kubectl.
    await asyncio.to_thread(installer.install)
    suite = await asyncio.to_thread(build.ensure_suite, progress)

    bed: Testbed | None = None
    try:
        if options.kubeconfig is not None:
            kubeconfig, registry_addr, kubelet_root = options.kubeconfig.resolve(), options.registry, None
            if options.preset is not None and options.preset.runtime_config:
                await check_api_versions(options.preset, kubeconfig=kubeconfig, cluster=options.cluster)
        else:
            preset = options.preset
            bed = Testbed(root / "testbed", runtime_config=(preset.runtime_config or None) if preset else None)
            if (
                preset is not None
                and preset.max_kubelet_root
                and len(str(bed.layout.kubelet_root)) > (limit := preset.max_kubelet_root)
            ):
                progress.step(
                    f"warning: the kubelet root {bed.layout.kubelet_root} is longer than {limit} characters: some "
                    f"{preset.name} specs cannot create their sockets under it (use a short --dir, e.g. /tmp/dra)"
                )
            progress.step(f"testbed: up in {bed.layout.root} (nodeagent the only node)")
            started = time.monotonic()
            settings = await bed.up()
            await bed.start_agent()
            progress.step(f"testbed: node {settings.node_name} Ready in {time.monotonic() - started:.0f}s")
            kubeconfig, registry_addr, kubelet_root = (
                bed.layout.admin_kubeconfig,
                settings.registry,
                bed.layout.kubelet_root,
            )
        repo_list = None
        if registry_addr is None:
            progress.step("images: no --registry: the suite pulls from upstream's registries, which are not reachable")
        else:
            repo_list = repolist.write_repo_list(root / "repo-list.yaml", registry_addr)
            await prepare_images(suite.e2e_test, repo_list, registry_addr, report_dir, progress=progress)
        run_options = RunOptions(
            kubeconfig=kubeconfig,
            report_dir=report_dir,
            focus=options.focus,
            skip=options.skip,
            procs=options.procs,
            provider=options.provider,
            timeout=options.timeout,
            repo_list=repo_list,
            kubectl=kubernetes_bin_dir() / "kubectl",
            kubelet_root_dir=kubelet_root,
            label_filter=options.label_filter,
        )
        argv = ginkgo_argv(suite, run_options)
        env = dict(os.environ)
        env["KUBECONFIG"] = str(kubeconfig)
        if repo_list is not None:
            env["KUBE_TEST_REPO_LIST"] = str(repo_list)
        labels = f", label filter {options.label_filter!r}" if options.label_filter else ""
        progress.step(f"ginkgo: focus {options.focus!r}, skip {options.skip!r}{labels}, {options.procs} process(es)")
        progress.step(f"ginkgo: output in {report_dir / 'ginkgo.log'}")
        started = time.monotonic()
        code = await run_ginkgo(
            argv, env=env, log_path=report_dir / "ginkgo.log", show=progress.write, stop=stop_event()
        )
        progress.step(f"ginkgo: exit {code} after {time.monotonic() - started:.0f}s")
        if bed is not None:
            await _pulled(bed, report_dir, progress)
        results = junit.read_junit(report_dir)
        text = summary.format_summary(results)
        if options.preset is not None:
            text += "\n\n" + format_group_counts(group_counts(options.preset, results))
        (report_dir / "summary.txt").write_text(text + "\n")
        progress.write(text)
        progress.step(f"report: {report_dir}")
        counts = summary.count(results)
        if options.expected_specs and counts.ran + counts.skipped != options.expected_specs:
            # A name of the subset that selects nothing (renamed upstream) must not pass unnoticed.
            progress.step(
                f"subset: {counts.ran + counts.skipped} specs selected, expected {options.expected_specs}: "
                "a name in nodeagent/conformance/subset.py matches no spec"
            )
            return 1
        return 0 if code == 0 and counts.failed == 0 and counts.setup_failed == 0 else 1
    finally:
        if bed is not None:
            if options.keep:
                progress.step(
                    f"testbed kept: . {bed.layout.env_file}; down: nodeagent testbed down --dir {bed.layout.root}"
                )
            else:
                progress.step("testbed: down")
                await bed.down()


async def check_api_versions(preset: Preset, *, kubeconfig: Path, cluster: Path | None = None) -> None:
    """A cluster given by kubeconfig must serve what the preset's testbed would (its --runtime-config); else the
    specs that use those versions fail with "the server could not find the requested resource". A `nodeagent
    cluster up` cluster (--cluster) is asked as its admin, through its own kubectl."""
    try:
        if cluster is not None:
            served = await Cluster(cluster).kubectl("api-versions")
        else:
            served = await kubectl(kubeconfig, "api-versions")
    except (ClusterError, KubectlError) as exc:
        raise ConformanceError(str(exc)) from exc
    missing = missing_api_versions(preset.runtime_config, served.splitlines())
    if missing:
        raise ConformanceError(
            f"the cluster does not serve {', '.join(missing)}, which the {preset.name} preset's specs use: bring it "
            f"up with `nodeagent cluster up --preset {preset.name}` (or the apiserver's --runtime-config="
            f"{preset.runtime_config})"
        )


async def prepare_images(
    e2e_test: Path, repo_list: Path, registry_addr: str, report_dir: Path, *, progress: Progress
) -> None:
    """The suite's images: the testbed's stand-ins pushed under the suite's names, and `images.txt` (have / lack)."""
    needed = await asyncio.to_thread(images.list_images, e2e_test, repo_list, registry_addr)
    # Into the testbed's registry, or the one --registry names (a testbed's, brought up by `nodeagent up`).
    for ref in await images.push_aliases(registry_addr, needed):
        progress.step(f"images: pushed the testbed's stand-in as {ref}")
    held = await images.registry_inventory(registry_addr)
    cover = images.coverage(needed, held, registry_addr)
    (report_dir / "images.txt").write_text("\n".join(images.coverage_lines(cover)) + "\n")
    progress.step(
        f"images: the registry holds {len(cover.have)} of the {len(needed)} the suite names "
        f"({', '.join(f'{r.repository}:{r.tag}' for r in cover.have) or 'none'}); the rest in images.txt"
    )


async def _pulled(bed: Testbed, report_dir: Path, progress: Progress) -> None:
    """What the node holds after the run: the images the selected specs used (a listing that fails is only noted)."""
    try:
        used = await images.runtime_images(bed.layout.containerd_socket)
    except ConformanceError as exc:
        progress.step(f"images: {exc}")
        return
    (report_dir / "images-pulled.txt").write_text("".join(f"{name}\n" for name in used))
    progress.step(f"images: the node holds {len(used)} after the run: {', '.join(used)}")


def stop_event() -> asyncio.Event:
    """Set on SIGINT/SIGTERM, so the run interrupts ginkgo and still reads its report and brings the testbed down."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop
