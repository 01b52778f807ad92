"""One kubeadm node on this machine: a private mount and network namespace, its containerd, its pod network,
nodeagent as its kubelet, and kubeadm run inside the namespaces.

kubeadm hard-codes /etc/kubernetes and /var/lib/kubelet. Each node gets a mount namespace of its own (`unshare
--mount --propagation private`, held open by a `sleep infinity`) in which the node's own `etc-kubernetes` and
`var-lib-kubelet` directories are bind-mounted over those two paths, and its `var-run-cdi` over /var/run/cdi
(containerd's default CDI spec directory, which DRA drivers' pods write to through a hostPath). kubeadm, containerd
(whose runc resolves the pods' hostPaths, e.g. /etc/kubernetes/pki) and the kubelet all run in it (`nsenter -t PID
-m`), so two nodes never see each other's files and the host's are never touched (only the three empty mount points
are made on the host if missing). Everything mounted in the namespace goes away with it. The same `unshare` makes
the node's network namespace (nodenet.py: its address, its iptables, its ports, its pod bridge), entered with the
mount namespace.

The kubelet is started as kubeadm's systemd drop-in would (there is no systemd here): the `kubelet` console script
with $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS, rebuilt from the files
kubeadm wrote (kubeletflags.read_drop_in), as soon as kubeadm has written them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

import nodeagent
from cri.errors import CRIError
from nodeagent.cluster import nodenet
from nodeagent.cluster.config import NodePlan, kubelet_patch
from nodeagent.kubeletflags import read_drop_in
from nodeagent.testbed import cniplugin, configs, hostnet, processes
from nodeagent.testbed.layout import Layout, Settings

log = logging.getLogger(__name__)

ETC_KUBERNETES = Path("/etc/kubernetes")
VAR_LIB_KUBELET = Path("/var/lib/kubelet")
HOST_CDI_SPEC_DIR = Path(configs.HOST_CDI_SPEC_DIR)
MOUNTNS = "mountns"
CONTAINERD = "containerd"
KUBELET = "kubelet"
# Stopped in this order: the kubelet first, containerd after kubeadm reset removed its pods, the namespace last.
COMPONENTS = (KUBELET, CONTAINERD, cniplugin.HELPER, MOUNTNS)
HOLDER_ARGV = ("sleep", "infinity")
Progress = Callable[[str], None]


class NodeError(RuntimeError):
    """A step of a node's start or stop failed; the message names it."""


@dataclass(frozen=True)
class KubeadmResult:
    returncode: int
    output: str
    seconds: float


class Node:
    def __init__(self, root: Path, plan: NodePlan, registry: str, service_cidr: str, fabric: nodenet.Fabric) -> None:
        self.root = root
        self.plan = plan
        self.registry = registry
        self.fabric = fabric
        self.layout = Layout(root)
        self.etc = root / "etc-kubernetes"
        self.var_lib = root / "var-lib-kubelet"
        self.patches = root / "patches"
        self.etcd_data = root / "etcd"
        self.var_run_cdi = root / "var-run-cdi"
        self.settings = Settings(
            node_name=plan.name,
            etcd_client_port=0,
            etcd_peer_port=0,
            apiserver_port=0,
            controller_manager_port=0,
            scheduler_port=0,
            registry_port=int(registry.rsplit(":", 1)[1]),
            stream_port=0,
            bridge=hostnet.bridge_name(root),
            pod_cidr=plan.pod_cidr,
            service_cidr=service_cidr,
        )

    @property
    def cri_socket(self) -> str:
        return f"unix://{self.layout.containerd_socket}"

    def _pid(self, name: str) -> processes.Process | None:
        return processes.load(self.layout.pids, name)

    def ns_argv(self, argv: list[str]) -> list[str]:
        holder = self._pid(MOUNTNS)
        if holder is None or not holder.alive():
            raise NodeError(f"node {self.plan.name}: its mount namespace is not running")
        return ["nsenter", "-t", str(holder.pid), "-m", "-n", "--", *argv]

    def link(self) -> nodenet.NodeLink:
        holder = self._pid(MOUNTNS)
        if holder is None or not holder.alive():
            raise NodeError(f"node {self.plan.name}: its namespace is not running")
        return nodenet.NodeLink(pid=holder.pid, address=self.plan.address, pod_cidr=self.plan.pod_cidr)

    @property
    def veth(self) -> str:
        return nodenet.veth_name(self.settings.bridge)

    # --- start ----------------------------------------------------------------------------------------------------

    async def start(self, stream_port: int) -> None:
        """The namespace, the pod network and containerd, ready for kubeadm."""
        self.settings = replace(self.settings, stream_port=stream_port)
        for path in (self.etc, self.var_lib, self.patches, self.layout.logs):
            path.mkdir(parents=True, exist_ok=True)
        (self.patches / "kubeletconfiguration.yaml").write_text(self._patch_text())
        self._start_namespace()
        await asyncio.to_thread(
            nodenet.attach, self.link(), self.fabric, veth=self.veth, pod_bridge=self.settings.bridge
        )
        lay = self.layout
        lay.containerd.mkdir(parents=True, exist_ok=True)
        # The cluster's registry is on the fabric's gateway (the node's loopback is its own): the sandbox image
        # and the registry's hosts.toml name it there.
        text = configs.containerd_config(lay, self.settings)
        lay.containerd_config.write_text(text.replace(self.settings.registry, self.registry))
        hosts = lay.registry_hosts / self.registry
        hosts.mkdir(parents=True, exist_ok=True)
        (hosts / "hosts.toml").write_text(registry_hosts_toml(self.registry))
        lay.cni_conf_dir.mkdir(parents=True, exist_ok=True)
        (lay.cni_conf_dir / "10-nodeagent.conflist").write_text(configs.cni_conflist(lay, self.settings))
        plugin = cniplugin.install_plugins(lay)
        # In the namespace too: containerd's pod netns files (/var/run/netns/cni-...) are nsfs mounts made there.
        helper = self.start_in_namespace(cniplugin.HELPER, list(plugin.helper_argv()))
        containerd = self.start_in_namespace(
            CONTAINERD, ["/usr/bin/containerd", "--config", str(lay.containerd_config)]
        )
        await _until(lambda: cniplugin.helper_ready(lay), what="cni helper", proc=helper)
        await _until(self._containerd_ready, what="containerd", proc=containerd)

    def _patch_text(self) -> str:
        return kubelet_patch(self.plan)

    def private_dirs(self) -> list[tuple[Path, Path]]:
        """(the node's own directory, the host path it is bind-mounted over in the node's mount namespace): the two
        kubeadm hard-codes, and containerd's default CDI spec directory, where a DRA driver's proxy pod writes its
        CDI specs through a hostPath (test/e2e/testing-manifests/dra): each node's containerd reads only its own."""
        return [
            (self.etc, ETC_KUBERNETES),
            (self.var_lib, VAR_LIB_KUBELET),
            (self.var_run_cdi, HOST_CDI_SPEC_DIR),
        ]

    def _start_namespace(self) -> None:
        for source, point in self.private_dirs():
            source.mkdir(parents=True, exist_ok=True)
            point.mkdir(parents=True, exist_ok=True)
        script = " && ".join(
            [
                *(f"mount --bind {shlex.quote(str(src))} {point}" for src, point in self.private_dirs()),
                f"exec {' '.join(HOLDER_ARGV)}",
            ]
        )
        _start_then_exec(
            MOUNTNS,
            ["unshare", "--mount", "--net", "--propagation", "private", "--", "sh", "-c", script],
            HOLDER_ARGV,
            self.layout,
        )

    async def _containerd_ready(self) -> bool:
        from nodeagent.testbed.testbed import _containerd_ready  # noqa: PLC0415

        try:
            return await _containerd_ready(self.layout)
        except (CRIError, OSError):  # the socket answers before the CRI plugin does
            return False

    # --- kubeadm and the kubelet ----------------------------------------------------------------------------------

    async def kubeadm(
        self, args: list[str], *, kubeadm: Path, timeout: float, progress: Progress, start_kubelet: bool = True
    ) -> KubeadmResult:
        """Run kubeadm in the node's namespace; start the kubelet as soon as kubeadm has written its files."""
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *self.ns_argv([str(kubeadm), *args]),
            stdin=asyncio.subprocess.DEVNULL,
            # Its preflight runs `kubelet --version`: the console script must find this checkout's nodeagent.
            env={**os.environ, **_python_path_env()},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        lines: list[str] = []
        log_path = self.layout.logs / f"kubeadm-{args[0]}.log"

        async def read() -> None:
            assert proc.stdout is not None
            with log_path.open("a") as out:
                async for raw in proc.stdout:
                    line = raw.decode(errors="replace").rstrip()
                    lines.append(line)
                    out.write(line + "\n")
                    out.flush()
                    if line.startswith("[") and "]" in line:
                        progress(f"{self.plan.name}: {line}")

        reader = asyncio.create_task(read())
        waiter = asyncio.ensure_future(proc.wait())
        starter = asyncio.ensure_future(
            self._start_kubelet_when_configured() if start_kubelet else asyncio.Event().wait()
        )
        try:
            done, _ = await asyncio.wait({waiter, starter}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if waiter not in done:
                proc.kill()
                await proc.wait()
                if starter in done and starter.exception() is not None:
                    raise NodeError(f"kubeadm {args[0]} on {self.plan.name}: {starter.exception()}")
                raise NodeError(f"kubeadm {args[0]} on {self.plan.name} did not finish in {timeout:.0f}s")
        finally:
            await reader
            starter.cancel()
            with contextlib.suppress(asyncio.CancelledError, NodeError):
                await starter
        return KubeadmResult(proc.returncode or 0, "\n".join(lines), time.monotonic() - started)

    async def _start_kubelet_when_configured(self) -> None:
        flags, config = self.var_lib / "kubeadm-flags.env", self.var_lib / "config.yaml"
        # Polled: kubeadm writes them from another process, there is nothing to wait on.
        while True:
            if flags.exists() and config.exists():
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(0.2)  # both written in one phase: let the second one's write finish
        kubelet = self.start_kubelet()
        # kubeadm would wait minutes for a kubelet that is gone: say so at once.
        while True:
            if not kubelet.alive():
                break
            await asyncio.sleep(1)
        raise NodeError(f"the kubelet of {self.plan.name} exited:\n{processes.tail(kubelet.log_path, 20)}")

    def start_kubelet(self) -> processes.Process:
        running = self._pid(KUBELET)
        if running is not None and running.alive():
            return running
        kubelet = shutil.which("kubelet")
        if kubelet is None:
            raise NodeError("the `kubelet` console script (nodeagent) is not on PATH: pip install -e .")
        argv = read_drop_in(self.var_lib / "kubeadm-flags.env", self.root / "default-kubelet")
        # The console script run by this Python, so the process's command line is exactly what is recorded.
        # This checkout's nodeagent, whatever directory the console script was installed from.
        return self.start_in_namespace(KUBELET, [sys.executable, kubelet, *argv], env=_python_path_env())

    def start_in_namespace(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> processes.Process:
        """`argv` in the node's mount namespace; nsenter (no PID namespace: no fork) execs it in place."""
        return _start_then_exec(name, self.ns_argv(argv), tuple(argv), self.layout, env)

    # --- stop -----------------------------------------------------------------------------------------------------

    async def reset(self, *, kubeadm: Path, progress: Progress) -> KubeadmResult | None:
        """`kubeadm reset -f` in the node's namespace (it removes the pods through the CRI and the files kubeadm
        wrote); None when the namespace is gone already."""
        holder = self._pid(MOUNTNS)
        if holder is None or not holder.alive():
            return None
        kubelet = self._pid(KUBELET)
        if kubelet is not None:
            await asyncio.to_thread(processes.stop, kubelet, pid_dir=self.layout.pids)
        containerd = self._pid(CONTAINERD)
        args = ["reset", "-f", f"--cri-socket={self.cri_socket}"]
        if containerd is None or not containerd.alive():
            args.append("--skip-phases=remove-etcd-member")
        return await self.kubeadm(args, kubeadm=kubeadm, timeout=120, progress=progress, start_kubelet=False)

    async def stop(self) -> list[str]:
        """Stop what the node started, by PID, and remove its bridge; returns what was left and removed."""
        for name in COMPONENTS:
            proc = self._pid(name)
            if proc is not None:
                await asyncio.to_thread(processes.stop, proc, pid_dir=self.layout.pids)
        # The pod bridge, eth0 and every pod's veth went with the node's network namespace.
        removed = hostnet.unmount_under(self.root)
        removed += remove_cgroups(self.plan.cgroup_root)
        return removed


def registry_hosts_toml(registry: str) -> str:
    """containerd's hosts.toml for the cluster's registry: plain HTTP on the fabric's gateway."""
    url = f"http://{registry}"
    return f'server = "{url}"\n\n[host."{url}"]\n  capabilities = ["pull", "resolve", "push"]\n  skip_verify = true\n'


def _python_path_env() -> dict[str, str]:
    checkout = str(Path(nodeagent.__file__).resolve().parent.parent)
    current = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": f"{checkout}:{current}" if current else checkout}


def _start_then_exec(
    name: str, argv: list[str], final: tuple[str, ...], layout: Layout, env: dict[str, str] | None = None
) -> processes.Process:
    """Start `argv`, which execs `final` in the same process (unshare ... exec, nsenter), and record `final` as its
    command line: what `alive()` compares, so `stop` finds the process by PID and command line as for any other."""
    proc = processes.start(name, argv, pid_dir=layout.pids, log_dir=layout.logs, env=env)
    deadline = time.monotonic() + 10
    while (current := processes._cmdline(proc.pid)) != final:
        if current is None or time.monotonic() > deadline:
            raise processes.ComponentFailed(name, f"did not start {final[0]}", proc.log_path)
        time.sleep(0.02)
    record = processes.Process(name=name, pid=proc.pid, argv=final, log_path=proc.log_path)
    (layout.pids / f"{name}.json").write_text(
        json.dumps({"pid": record.pid, "argv": list(record.argv), "log": str(record.log_path)})
    )
    return record


def remove_cgroups(cgroup_root: str, base: Path = Path("/sys/fs/cgroup")) -> list[str]:
    """Remove the node's (empty, once its pods are gone) cgroup trees, deepest first, in every hierarchy (cgroup v1
    has one per controller, v2 one); returns what was removed."""
    name = cgroup_root.strip("/")
    tops = [p for p in (base / name, *base.glob(f"*/{name}")) if p.is_dir()]
    removed = []
    for top in tops:
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
        for path in [*dirs, top]:
            with contextlib.suppress(OSError):
                path.rmdir()
                removed.append(f"cgroup {path}")
    return removed


def leftover_cgroups(cgroup_root: str, base: Path = Path("/sys/fs/cgroup")) -> list[Path]:
    name = cgroup_root.strip("/")
    return [p for p in (base / name, *base.glob(f"*/{name}")) if p.is_dir()]


async def _until(
    check: Callable[[], Awaitable[bool]], *, what: str, proc: processes.Process, timeout: float = 90
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise processes.ComponentFailed(what, "exited during start-up", proc.log_path)
        if await check():
            return
        await asyncio.sleep(0.2)
    raise processes.ComponentFailed(what, f"not ready after {timeout:.0f}s", proc.log_path)
