"""`nodeagent conformance --suite node-eviction`: upstream's node e2e eviction specs against a testbed's agent.

Under the run's directory (`--dir`, default a new one under /var/lib/nodeagent/conformance):
  testbed/     the testbed, without node-condition taints (`Testbed(node_condition_taints=False)`: a not-ready or
               memory-pressure taint hides the node from the suite); brought down at the end unless --keep
  node-e2e/    the suite's working directory (`nodeadapter.prepare`): kubelet-config, bin/{sudo,systemctl},
               shim.json, systemctl.log
  repo-list.yaml, report/  as for e2e.test (harness.py): junit_01.xml, ginkgo.log, summary.txt, images.txt

The agent is started through the shim (`systemctl start`), as the suite later restarts it. `e2e_node.test` runs
alone (every spec is [Serial]) in node-e2e/, with the shims first on its PATH. docs/conformance.md,
"node-eviction suite", has the design and the results.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from nodeagent.conformance import build, junit, nodeadapter, nodesuite, repolist, summary
from nodeagent.conformance.errors import ConformanceError
from nodeagent.conformance.harness import prepare_images, run_dir, stop_event
from nodeagent.conformance.presets import format_group_counts, group_counts
from nodeagent.conformance.progress import Progress
from nodeagent.conformance.run import run_ginkgo
from nodeagent.conformance.systemctl_shim import Kubelet
from nodeagent.kuberuntime.cgroups import remove_cgroup_tree
from nodeagent.testbed import install as installer
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.versions import kubernetes_bin_dir

DEFAULT_TIMEOUT = "4h"  # 22 specs of 10-15 min each, run one after the other


@dataclass(frozen=True)
class NodeRunOptions:
    focus: str = nodesuite.NODE_EVICTION.focus  # a narrower focus runs some of the selection
    dir: Path | None = None
    kubelet: Kubelet = Kubelet.NODEAGENT
    timeout: str = DEFAULT_TIMEOUT
    keep: bool = False


@dataclass(frozen=True)
class SuiteTarget:
    """Where the suite finds the cluster and the node."""

    apiserver_url: str
    token: str
    containerd_socket: Path
    report_dir: Path


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


async def node_conformance(options: NodeRunOptions, progress: Progress | None = None) -> int:
    """The whole command; 0 when every selected spec passed."""
    progress = progress or Progress()
    nodeadapter.check_ports()
    root = run_dir(options.dir)
    report_dir = root / "report"
    report_dir.mkdir(parents=True, exist_ok=True)
    for stale in report_dir.glob("junit_*.xml"):
        stale.unlink()
    progress.step(f"run directory {root}")
    await asyncio.to_thread(installer.install)
    binary = await asyncio.to_thread(build.build_e2e_node, progress)
    bed = Testbed(root / "testbed", node_condition_taints=False)
    d: nodeadapter.SuiteDir | None = None
    try:
        progress.step(
            f"testbed: up in {bed.layout.root} (no node-condition taints: controller-manager without "
            "node-lifecycle-controller, apiserver without TaintNodesByCondition)"
        )
        started = time.monotonic()
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
            f"{time.monotonic() - started:.0f}s"
        )
        kubectl = kubernetes_bin_dir() / "kubectl"
        token = await asyncio.to_thread(nodeadapter.bearer_token, kubectl, bed.layout.admin_kubeconfig)
        repo_list = repolist.write_repo_list(root / "repo-list.yaml", settings.registry)
        await prepare_images(binary, repo_list, settings.registry, report_dir, progress=progress)
        target = SuiteTarget(settings.apiserver_url, token, bed.layout.containerd_socket, report_dir)
        argv = suite_argv(binary, target, focus=options.focus, timeout=options.timeout)
        progress.step(f"e2e_node.test: focus {options.focus!r}, in {d.root}, output in {report_dir / 'ginkgo.log'}")
        started = time.monotonic()
        code = await run_ginkgo(
            argv,
            env=suite_env(d, repo_list, dict(os.environ)),
            log_path=report_dir / "ginkgo.log",
            show=progress.write,
            stop=stop_event(),
            cwd=d.root,
        )
        progress.step(f"e2e_node.test: exit {code} after {time.monotonic() - started:.0f}s")
        results = junit.read_junit(report_dir)
        text = summary.format_summary(results)
        text += "\n\n" + format_group_counts(group_counts(nodesuite.NODE_EVICTION, results))
        (report_dir / "summary.txt").write_text(text + "\n")
        progress.write(text)
        progress.step(f"report: {report_dir}; shim calls: {d.log}")
        counts = summary.count(results)
        return 0 if code == 0 and counts.failed == 0 and counts.setup_failed == 0 else 1
    finally:
        if options.keep:
            progress.step(
                f"testbed kept: . {bed.layout.env_file}; down: nodeagent testbed down --dir {bed.layout.root}"
            )
        else:
            progress.step("testbed: down")
            await _down(bed, options.kubelet)


async def _down(bed: Testbed, kubelet: Kubelet) -> None:
    if kubelet is Kubelet.UPSTREAM:
        from nodeagent.testbed import upstreamkubelet  # noqa: PLC0415

        running = upstreamkubelet.running_kubelet(bed)
        if running is not None:
            await upstreamkubelet.stop_kubelet(running)
    await bed.down()
    # `cgroupRoot: /` put the QoS tree at /kubepods; the testbed removes only its own cgroup root.
    await asyncio.to_thread(remove_cgroup_tree, nodeadapter.KUBEPODS_CGROUP)
