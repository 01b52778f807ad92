"""The upstream kubelet as the testbed's node, in place of nodeagent: the peer that the differential corpus and
`benchmarks/versus` compare nodeagent with.

It runs with what nodeagent gets from the testbed: the node's credential (`DIR/node.kubeconfig`, CN
`system:node:<name>`, so the Node authorizer and NodeRestriction treat both alike), the node name and address, the
testbed's containerd (and so its CNI config, CNI plugin and registry mirror, which are containerd's), and the
KubeletConfiguration of `DIR/nodeagent.yaml` (same cgroupRoot, address, ports, serving certificate, authn/authz,
staticPodPath, podCIDR), to which `kubelet_config` adds only what this machine needs:

- `failCgroupV1: false`: the machines are cgroup v1 (hybrid). v1.34 still defaults to false (v1.35 flips it and
  refuses to start on v1), so it is written down explicitly.
- `failSwapOn: false`: these machines have no swap, so the check would pass; it is off so that the testbed also
  starts on a developer's machine with swap (nodeagent does not check swap at all).
- `oomScoreAdj: 0`: the kubelet lowers its own oom_score_adj to -999 by default, which these machines refuse even to
  root ("Failed to ApplyOOMScoreAdj ... permission denied" at start, not fatal: it keeps 0); 0 asks for what it
  gets. Containers are not affected: containerd's `restrict_oom_score_adj = true` (testbed/configs.py) already
  clamps what the kubelet asks for them (-997 for Guaranteed pods, 1000 for BestEffort) to containerd's own value.
- `cgroupDriver: cgroupfs` (already in nodeagent.yaml): PID 1 is not systemd. containerd 1.7 answers no
  RuntimeConfig, so the kubelet takes the driver from the config.
- `volumePluginDir` under the kubelet's root-dir: the FlexVolume prober creates its directory, by default
  /usr/libexec/kubernetes/kubelet-plugins/volume/exec/ on the host; a testbed writes only below its directory.

The cgroupRoot (`/nodeagent-<bridge>`) must exist before the kubelet starts (its container manager refuses a missing
one: "invalid configuration: cgroup-root ... doesn't exist"); nodeagent needs nothing there because runc creates the
parents. `start_kubelet` creates it in every v1 hierarchy; `testbed down` removes it with nodeagent's.

Command line: `--config`, `--kubeconfig`, `--hostname-override` (the testbed's node name), `--node-ip`, and
`--root-dir DIR/upstream-kubelet` (its own, so nothing of one agent's pod directories is read by the other).
Pod logs go to `DIR/upstream-kubelet/pod-logs` (podLogsDir), not to the machine's /var/log/pods: the kubelet's
container GC removes, every minute, each directory there whose pod it does not know (upstream's
evictPodLogsDirectories), and every testbed on a machine writes its pods' logs to /var/log/pods (the testbed leaves
nodeagent's podLogsDir at its default). With the default, a kubelet on one testbed deleted the logs of the short
pods another testbed's agent was running: their output was lost (issue 34). The kubelet's /var/log/containers links
are upstream's and cannot be moved (its GC removes only dead ones).

Only one of nodeagent and the kubelet runs against a containerd at a time: `start_kubelet` refuses while a process
holds the node (an agent or a kubelet recorded under `DIR/pids/`, or any process started with the node's
kubeconfig), and `Testbed.start_agent` refuses while a kubelet does. `stop_kubelet` stops it (SIGTERM, then
SIGKILL), then removes every pod sandbox and container it left in containerd, their log directories and links,
and the mounts and files under its root-dir, so that nodeagent can start next on a clean runtime. The Node object
and the pods bound to it stay in the apiserver: they are the caller's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cri.client import connect
from cri.errors import CRIError
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import KubeError
from nodeagent.kuberuntime.cgroups import CGROUP_ROOT, remove_cgroup_tree
from nodeagent.testbed import configs, hostnet, processes, sandboxes
from nodeagent.testbed.layout import Layout, Settings
from nodeagent.testbed.testbed import AGENT, UPSTREAM_KUBELET, Testbed, TestbedError
from nodeagent.testbed.versions import kubelet_path

logger = logging.getLogger(__name__)

READY_TIMEOUT = 120.0
STOP_GRACE = 20.0
#: upstream's ContainerLogsDir: links named <pod>_<namespace>_<container>-<id>.log into the pod log directories.
CONTAINER_LOG_LINKS = Path("/var/log/containers")
DEFAULT_POD_LOGS_DIR = Path("/var/log/pods")
#: what `kubelet_config` adds to the testbed's KubeletConfiguration (the module docstring says why, field by field).
MACHINE_FIELDS: dict[str, object] = {"failCgroupV1": False, "failSwapOn": False, "oomScoreAdj": 0}


class UpstreamKubeletError(TestbedError):
    """The upstream kubelet cannot be started or did not become Ready; the message carries its log's tail."""


class NodeHeld(UpstreamKubeletError):
    """Another agent (nodeagent or a kubelet) already runs as this testbed's node."""


@dataclass(frozen=True)
class KubeletProcess:
    """A running upstream kubelet: its process as the testbed records it, and where it keeps its files."""

    process: processes.Process
    layout: Layout
    root_dir: Path
    config: Path
    pod_logs_dir: Path = DEFAULT_POD_LOGS_DIR
    cgroup_root: str = ""

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def log(self) -> Path:
        return self.process.log_path

    def alive(self) -> bool:
        return self.process.alive()


def root_dir(layout: Layout) -> Path:
    """The kubelet's --root-dir: its own, beside nodeagent's DIR/kubelet."""
    return layout.root / "upstream-kubelet"


def config_path(layout: Layout) -> Path:
    return layout.root / "upstream-kubelet.yaml"


def pod_logs_dir(root: Path) -> Path:
    """The kubelet's podLogsDir: this testbed's own (the module docstring says why not /var/log/pods)."""
    return root / "pod-logs"


def kubelet_config(agent_config: dict[str, Any], *, root: Path) -> dict[str, Any]:
    """The testbed's KubeletConfiguration (nodeagent.yaml, parsed) as the upstream kubelet needs it on this machine:
    every field kept, MACHINE_FIELDS, volumePluginDir and podLogsDir added (a caller's own value of those wins)."""
    config = dict(agent_config)
    own = {"volumePluginDir": str(root / "volume-plugins"), "podLogsDir": str(pod_logs_dir(root))}
    for key, value in {**MACHINE_FIELDS, **own}.items():
        config.setdefault(key, value)
    return config


def kubelet_argv(binary: Path, *, config: Path, layout: Layout, settings: Settings, root: Path) -> list[str]:
    return [
        str(binary),
        f"--config={config}",
        f"--kubeconfig={layout.node_kubeconfig}",
        f"--hostname-override={settings.node_name}",
        f"--node-ip={settings.node_ip}",
        f"--root-dir={root}",
    ]


def holds_node(argv: tuple[str, ...], kubeconfig: Path) -> bool:
    """Whether a command line runs an agent with this node's credential (`--kubeconfig X` or `--kubeconfig=X`)."""
    path = str(kubeconfig)
    return any(
        arg == f"--kubeconfig={path}" or (arg == "--kubeconfig" and i + 1 < len(argv) and argv[i + 1] == path)
        for i, arg in enumerate(argv)
    )


def node_holders(layout: Layout) -> list[str]:
    """Who runs as this testbed's node now: agents recorded under DIR/pids, and any other process started with the
    node's kubeconfig (the integration tests run nodeagent without a pid file). One line each, for the error."""
    found: dict[int, str] = {}
    for name in (AGENT, UPSTREAM_KUBELET):
        proc = processes.load(layout.pids, name)
        if proc is not None and proc.alive():
            found[proc.pid] = f"{name} pid {proc.pid} ({layout.pids / (name + '.json')})"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in found or int(entry.name) == os.getpid():
            continue
        try:
            argv = tuple(a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0")[:-1])
        except OSError:
            continue
        if holds_node(argv, layout.node_kubeconfig):
            found[int(entry.name)] = f"pid {entry.name}: {' '.join(argv)[:160]}"
    return [found[pid] for pid in sorted(found)]


def refuse_if_held(layout: Layout, starting: str) -> None:
    holders = node_holders(layout)
    if holders:
        raise NodeHeld(
            f"cannot start {starting}: the testbed's node in {layout.root} is already run by "
            + "; ".join(holders)
            + " (only one of nodeagent and the upstream kubelet runs against a containerd at a time: stop it first)"
        )


def ensure_cgroup_root(cgroup_root: str, *, root: Path = CGROUP_ROOT) -> list[Path]:
    """Create `cgroup_root` in every hierarchy (v1: one per controller; v2: the one tree) and return what was made.

    In a v1 cpuset hierarchy a new cgroup starts with empty cpuset.cpus/mems, in which no task can run: they are
    copied from the parent, as runc does for the parents it creates."""
    relative = cgroup_root.strip("/")
    if not relative:
        return []
    made = []
    hierarchies = (
        [root]
        if (root / "cgroup.controllers").exists()
        else sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    )
    for hierarchy in hierarchies:
        path = hierarchy / relative
        if path.is_dir():
            continue
        path.mkdir(parents=True)
        made.append(path)
        for name in ("cpuset.cpus", "cpuset.mems"):
            own = path / name
            if own.exists() and not own.read_text().strip():
                own.write_text((path.parent / name).read_text())
    return made


def _spawn(argv: list[str], *, log_path: Path, pid_dir: Path) -> processes.Process:
    """Start the kubelet detached (its own session, as the testbed's daemons) and record it as DIR/pids/kubelet.json
    in processes' format, so `testbed down` stops it with the rest."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    pid_dir.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as out:
        popen = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    proc = processes.Process(name=UPSTREAM_KUBELET, pid=popen.pid, argv=tuple(argv), log_path=log_path)
    deadline = time.monotonic() + 2.0
    while not proc.alive() and popen.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)  # /proc/PID/cmdline reads empty for a moment after the spawn
    record = {"pid": proc.pid, "argv": list(proc.argv), "log": str(log_path)}
    (pid_dir / f"{UPSTREAM_KUBELET}.json").write_text(json.dumps(record))
    popen.returncode = 0  # the daemon belongs to the testbed, not to this Python process (as processes.start)
    return proc


async def start_kubelet(
    testbed: Testbed, log: Path, *, config: Path | None = None, timeout: float = READY_TIMEOUT
) -> KubeletProcess:
    """Run the upstream kubelet as the testbed's node and return once the Node is Ready.

    `config` is a KubeletConfiguration to start from instead of the testbed's nodeagent.yaml (as nodeagent's
    `start_agent(config=...)`); the machine's fields are added to it all the same. Raises NodeHeld while another
    agent runs as the node, UpstreamKubeletError (with the log's tail) when the kubelet exits or is not Ready in
    `timeout`; then nothing of it is left running.
    """
    layout, settings = testbed.layout, testbed.settings
    binary = kubelet_path()
    if not binary.exists():
        raise UpstreamKubeletError(f"the upstream kubelet is not built ({binary}): run `nodeagent testbed install "
                                   "--with-kubelet` first")  # fmt: skip
    refuse_if_held(layout, "the upstream kubelet")
    root = root_dir(layout)
    root.mkdir(parents=True, exist_ok=True)
    source = yaml.safe_load((config or layout.agent_config).read_text()) or {}
    path = config_path(layout)
    config_doc = kubelet_config(source, root=root)
    path.write_text(yaml.safe_dump(config_doc, sort_keys=False))
    cgroup_root = str(source.get("cgroupRoot") or configs.agent_cgroup_root(settings))
    await asyncio.to_thread(ensure_cgroup_root, cgroup_root)
    argv = kubelet_argv(binary, config=path, layout=layout, settings=settings, root=root)
    proc = await asyncio.to_thread(_spawn, argv, log_path=log, pid_dir=layout.pids)
    pod_logs = Path(str(config_doc.get("podLogsDir") or DEFAULT_POD_LOGS_DIR))
    kubelet = KubeletProcess(
        process=proc, layout=layout, root_dir=root, config=path, pod_logs_dir=pod_logs, cgroup_root=cgroup_root
    )
    logger.info("upstream kubelet started pid=%d log=%s", proc.pid, log)
    reason = await _wait_node_ready(kubelet, settings.node_name, timeout)
    if not reason:
        logger.info("upstream kubelet node ready node=%s pid=%d", settings.node_name, proc.pid)
        return kubelet
    tail = processes.tail(log, 40)
    await stop_kubelet(kubelet)
    raise UpstreamKubeletError(f"the upstream kubelet {reason}\n--- tail of {log} ---\n{tail}")


def running_kubelet(testbed: Testbed) -> KubeletProcess | None:
    """The kubelet recorded in DIR/pids/kubelet.json while it runs (started by another process, e.g. a run that
    was interrupted), so that it can be stopped and cleaned up after."""
    layout = testbed.layout
    proc = processes.load(layout.pids, UPSTREAM_KUBELET)
    if proc is None or not proc.alive():
        return None
    config = config_path(layout)
    source = yaml.safe_load(config.read_text()) if config.exists() else {}
    source = source or {}
    return KubeletProcess(
        process=proc,
        layout=layout,
        root_dir=root_dir(layout),
        config=config,
        pod_logs_dir=Path(str(source.get("podLogsDir") or DEFAULT_POD_LOGS_DIR)),
        cgroup_root=str(source.get("cgroupRoot") or configs.agent_cgroup_root(testbed.settings)),
    )


def node_is_ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def _wait_node_ready(kubelet: KubeletProcess, node_name: str, timeout: float) -> str:
    """ "" once the Node is Ready; else why not (the kubelet exited, or the time ran out)."""
    deadline = time.monotonic() + timeout
    last_error = ""
    async with KubeClient.from_kubeconfig(kubelet.layout.admin_kubeconfig) as admin:
        while kubelet.alive():
            try:
                if node_is_ready(await admin.get(paths.node(node_name))):
                    return ""
            except KubeError as exc:  # NotFound until it registers
                last_error = f" (last: {exc})"
            if time.monotonic() > deadline:
                return f"did not make node {node_name} Ready in {timeout:.0f}s{last_error}"
            await asyncio.sleep(0.2)
    return "exited before the node was Ready"


async def stop_kubelet(proc: KubeletProcess) -> None:
    """Stop the kubelet (SIGTERM; SIGKILL after STOP_GRACE s), then remove what it left: every pod sandbox and
    container in the testbed's containerd, their pod log directories and /var/log/containers links, the mounts
    and files under its root-dir. Idempotent: stopping a stopped kubelet only cleans up."""
    layout = proc.layout
    await asyncio.to_thread(processes.stop, proc.process, pid_dir=layout.pids, grace=STOP_GRACE)
    log_dirs = await _remove_runtime_objects(layout, proc.pod_logs_dir)
    removed_links = await asyncio.to_thread(_remove_log_leftovers, log_dirs)
    await asyncio.to_thread(hostnet.unmount_under, proc.root_dir)
    await asyncio.to_thread(_unmount_self_bind, proc.root_dir)
    await asyncio.to_thread(_empty_dir, proc.root_dir)
    await asyncio.to_thread(_remove_device_plugin_files, DEVICE_PLUGIN_DIR)
    if proc.cgroup_root.strip("/"):
        # Its QoS cgroups (kubepods, burstable, besteffort) carry limits and shares it set: nodeagent, next, makes
        # its own under the same root and must not inherit them.
        await asyncio.to_thread(remove_cgroup_tree, proc.cgroup_root)
    logger.info("upstream kubelet stopped pid=%d pod_log_dirs=%d links=%d", proc.pid, len(log_dirs), removed_links)


# Upstream's device manager serves its registration socket and writes its checkpoint here whatever --root-dir says
# (pluginapi.KubeletSocket, a constant).
DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
DEVICE_PLUGIN_FILES = ("kubelet.sock", "kubelet_internal_checkpoint")


def _remove_device_plugin_files(directory: Path) -> None:
    """The kubelet's own files in the fixed device-plugin directory; a plugin's socket there is its owner's."""
    for name in DEVICE_PLUGIN_FILES:
        (directory / name).unlink(missing_ok=True)


async def _remove_runtime_objects(layout: Layout, pod_logs_dir: Path) -> list[Path]:
    """Stop and remove every sandbox (CNI DEL runs, veths and addresses go) and then any container left; return the
    sandboxes' log directories."""
    log_dirs: list[Path] = []
    async with connect(f"unix://{layout.containerd_socket}", timeout=60.0) as cri:
        for sandbox in await cri.runtime.list_pod_sandbox():
            meta = sandbox.metadata
            if meta.uid:  # upstream's BuildPodLogsDirectory: <podLogsDir>/<namespace>_<name>_<uid>
                log_dirs.append(pod_logs_dir / f"{meta.namespace}_{meta.name}_{meta.uid}")
            await cri.runtime.stop_pod_sandbox(sandbox.id)
            await sandboxes.remove_pod_sandbox(cri.runtime, sandbox.id)
        for container in await cri.runtime.list_containers():
            with contextlib.suppress(CRIError):
                await cri.runtime.stop_container(container.id, 0)
            await cri.runtime.remove_container(container.id)
    return log_dirs


def _remove_log_leftovers(log_dirs: list[Path]) -> int:
    """The pod log directories of the removed sandboxes, and the kubelet's links into them."""
    removed = 0
    wanted = {str(d) for d in log_dirs}
    if CONTAINER_LOG_LINKS.is_dir():
        for link in CONTAINER_LOG_LINKS.iterdir():
            if link.is_symlink() and any(os.readlink(link).startswith(d + "/") for d in wanted):
                link.unlink(missing_ok=True)
                removed += 1
    for directory in log_dirs:
        shutil.rmtree(directory, ignore_errors=True)
    return removed


def _mounted_at(path: Path) -> bool:
    point = str(path.resolve())
    return any(line.split()[1] == point for line in Path("/proc/self/mounts").read_text().splitlines())


def _unmount_self_bind(root: Path) -> None:
    """As upstream's setupDataDirs, the kubelet bind-mounts its root-dir onto itself (to make it rshared); undo it,
    stacked as many times as starts made it."""
    for _ in range(16):
        if not _mounted_at(root):
            return
        if subprocess.run(["umount", str(root)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(root)], capture_output=True, check=False)


def _empty_dir(path: Path) -> None:
    if path.is_dir():
        for child in path.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
