"""The systemd cgroup driver on a real systemd + cgroup v2 host (issue 31): the Vagrant VM provisioned with
`cgroupDriver: systemd` and containerd's `SystemdCgroup = true` runs a Guaranteed, a Burstable and a BestEffort
static pod, with its agent joined to the session testbed's apiserver (an ssh tunnel, tests/integration/vmstats.py).

Checked inside the VM, through systemd itself (`systemctl show`) and the cgroup files:
- kubepods.slice, kubepods-burstable.slice and kubepods-besteffort.slice, and each pod's
  kubepods-<qos>-pod<uid, - as _>.slice, are transient units the agent started as libcontainer does (Description
  "libcontainer container <unit>", Wants= the parent slice), active, with their ControlGroup in upstream's tree;
- the pod slices carry the pod's limits as unit properties (MemoryMax, CPUWeight) and in their files (cpu.weight,
  cpu.max, memory.max);
- each container runs in containerd's cri-containerd-<id>.scope below its pod slice;
- once the Burstable pod's manifest is gone, its slice is stopped (no longer among the loaded units; `systemctl show`
  then synthesizes an inactive implicit slice of that name) and its cgroup removed;
- graceful node shutdown (check_graceful_shutdown): the agent's delay inhibitor lock in `systemd-inhibit --list`,
  logind's delay raised through the drop-in, and PrepareForShutdown true/false handled;
- /stats/summary from the read-only port against the cgroup files read around it (vmstats.check_summary): pods,
  containers, cpu, memory, network, process count, the node's memory, PSI (cpu, memory, io) at each level;
- a real memory eviction (check_memory_eviction): evictionHard memory.available 300 MiB below the VM's figure after
  boot, a dd hog from the apiserver evicted with upstream's status and message, MemoryPressure on the Node, the
  small pod and the static pods left running, the v2 PSI notifiers and the memory.events notifier armed (and which
  woke the manager, printed);
- the v2 notifiers firing for real (check_psi_notifier): a pod reclaiming at its 24Mi limit wakes the manager through
  a PSI trigger and through kubepods.slice's memory.events (`max` grew), and /metrics/cadvisor carries the six PSI
  counters (check_cadvisor_psi), the pod's container's memory "waiting" above zero.

Marked `vm` and deselected by default, like test_vm_cgroup_v2.py (a VM boot of its own under QEMU's software
emulation: 8 minutes with the box cached, plus the testbed's start). Run it with
`python3 -m pytest -m vm tests/integration/test_vm_systemd_cgroups.py -s`; it prints its timings, `systemd-cgls` of
kubepods.slice, the summary's node and the eviction's figures.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from nodeagent.kuberuntime.systemd_cgroup_names import to_systemd
from nodeagent.testbed.testbed import Testbed
from nodeagent.vm.host import Leftovers, LibvirtHost
from tests.integration.test_vm_cgroup_v2 import BURSTABLE, GUARANTEED, manifest, read_files
from tests.integration.test_vm_vagrant import NODE, Vagrant, booted_vm, libvirt_host, pods, running_pod, wait_for
from tests.integration.vmstats import (
    MIB,
    READ_ONLY_PORT,
    ApiTunnel,
    api_pod,
    available_now,
    check_summary,
    evicted_status,
    free_and_available,
    get_json,
    kubectl,
    node_ready,
    pressure_condition,
    read_summary,
    vm_kubeconfig,
    wait,
)

pytestmark = [pytest.mark.vm, pytest.mark.timeout(3000)]

__all__ = ["libvirt_host"]  # the fixture, shared

PROPERTIES = (
    "LoadState",
    "ActiveState",
    "Description",
    "Wants",
    "ControlGroup",
    "MemoryMax",
    "CPUWeight",
    "CPUQuotaPerSecUSec",
)

# name -> (resources, QoS tier, unit properties, cgroup files). Guaranteed: cpu 100m (102 shares, weight 4; quota
# 10000 of 100000 us, systemd's CPUQuota 10%, shown as 100ms per second), memory 32Mi; Burstable: requests cpu 50m
# (51 shares, weight 2), memory limit 64Mi; BestEffort: weight 1, no limit (systemd's "infinity"). Without a cpu
# limit, no CPUQuota (cpu.max stays "max 100000").
PODS: dict[str, tuple[str, str, dict[str, str], dict[str, str]]] = {
    "guaranteed": (
        GUARANTEED,
        "",
        {"MemoryMax": "33554432", "CPUWeight": "4", "CPUQuotaPerSecUSec": "100ms"},
        {"cpu.weight": "4", "cpu.max": "10000 100000", "memory.max": "33554432"},
    ),
    "burstable": (
        BURSTABLE,
        "burstable",
        {"MemoryMax": "67108864", "CPUWeight": "2", "CPUQuotaPerSecUSec": "infinity"},
        {"cpu.weight": "2", "cpu.max": "max 100000", "memory.max": "67108864"},
    ),
    "besteffort": (
        "",
        "besteffort",
        {"MemoryMax": "infinity", "CPUWeight": "1", "CPUQuotaPerSecUSec": "infinity"},
        {"cpu.weight": "1", "cpu.max": "max 100000", "memory.max": "max"},
    ),
}


class SshVagrant(Vagrant):
    """The VM with `ssh` run by OpenSSH from `vagrant ssh-config`: a `vagrant ssh` starts Ruby and Vagrant each
    time, which took over 300 s per call under a host load of 80; plain ssh is the same login without it."""

    def __init__(self, vagrant: Vagrant, config: Path) -> None:
        super().__init__(vagrant.cwd, vagrant.env, vagrant.log)
        config.write_text(vagrant.run("ssh-config").stdout)
        self.config = config

    def ssh(self, command: str, check: bool = True) -> str:
        """The command's stdout. A poll (`check=False`) that gets no answer in 300 s reads as an empty answer, to be
        asked again: under host load a call once hung 300 s while the pods started (run of 2026-11-29 09:05)."""
        try:
            proc = subprocess.run(
                ["ssh", "-F", str(self.config), "default", command],
                capture_output=True,
                text=True,
                check=False,
                timeout=300,
            )
        except subprocess.TimeoutExpired:
            with self.log.open("a") as f:
                f.write(f"$ ssh {command} -> timed out after 300 s\n")
            if check:
                raise AssertionError(f"ssh {command!r} timed out after 300 s") from None
            return ""
        with self.log.open("a") as f:
            f.write(f"$ ssh {command} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}\n")
        if check and proc.returncode != 0:
            raise AssertionError(
                f"ssh {command!r} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return proc.stdout


def unit_show(vagrant: Vagrant, unit: str) -> dict[str, str]:
    out = vagrant.ssh(f"systemctl show {unit} " + " ".join(f"-p {p}" for p in PROPERTIES), check=False)
    return dict(line.split("=", 1) for line in out.strip().splitlines() if "=" in line)


def slice_gone(vagrant: Vagrant, unit: str) -> bool:
    loaded = vagrant.ssh("systemctl list-units --all --plain --no-legend --no-pager 'kubepods*'").split()
    shown = unit_show(vagrant, unit)
    directory = f"/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/{unit}"
    return (
        unit not in loaded
        and shown.get("ActiveState") == "inactive"
        and shown.get("ControlGroup") == ""
        and shown.get("Description") != f"libcontainer container {unit}"
        and vagrant.ssh(f"test -d {directory} || echo gone").strip() == "gone"
    )


def agent_journal(vagrant: Vagrant) -> str:
    return vagrant.ssh("sudo journalctl -u nodeagent --no-pager -n 400", check=False)


def check_slices(vagrant: Vagrant, running: dict[str, dict[str, Any]]) -> None:
    # The QoS slices, as upstream's QOSContainerManager makes them through the driver.
    kubepods = unit_show(vagrant, "kubepods.slice")
    assert kubepods.get("ActiveState") == "active", kubepods
    assert kubepods.get("Description") == "libcontainer container kubepods.slice", kubepods
    assert kubepods.get("ControlGroup") == "/kubepods.slice", kubepods
    for tier, weight in (("burstable", "2"), ("besteffort", "1")):
        unit = f"kubepods-{tier}.slice"
        shown = unit_show(vagrant, unit)
        assert shown.get("ActiveState") == "active", shown
        assert shown.get("Description") == f"libcontainer container {unit}", shown
        assert shown.get("Wants") == "kubepods.slice", shown
        assert shown.get("ControlGroup") == f"/kubepods.slice/{unit}", shown
        assert shown.get("CPUWeight") == weight, shown

    for name, (_, tier, properties, files) in PODS.items():
        pod = running[name]
        assert pod["status"]["qosClass"].lower() == name, pod["status"].get("qosClass")
        uid = pod["metadata"]["uid"]
        # Guaranteed pods sit in kubepods.slice itself: kubepods-pod<uid>.slice.
        cgroup = to_systemd(f"/kubepods/{tier}/pod{uid}" if tier else f"/kubepods/pod{uid}")
        unit = cgroup.rsplit("/", 1)[-1]
        parent = f"kubepods-{tier}" if tier else "kubepods"
        assert unit == f"{parent}-pod{uid.replace('-', '_')}.slice"
        shown = unit_show(vagrant, unit)
        print(f"vm systemd {name} {unit}: {shown}")
        assert shown.get("ActiveState") == "active", shown
        assert shown.get("Description") == f"libcontainer container {unit}", shown
        assert shown.get("Wants") == f"{parent}.slice", shown
        assert shown.get("ControlGroup") == cgroup, shown
        assert {k: shown.get(k) for k in properties} == properties, shown
        directory = f"/sys/fs/cgroup{cgroup}"
        read = read_files(vagrant, directory)
        print(f"vm cgroup {name} {directory}: {read}")
        assert {"cpu", "memory", "pids"} <= set(read.get("cgroup.controllers", "").split()), read
        assert {k: read.get(k) for k in files} == files, read
        # containerd (SystemdCgroup = true) ran the container in a scope of runc's below the pod slice.
        scopes = vagrant.ssh(f"sudo find {directory} -mindepth 1 -maxdepth 1 -name 'cri-containerd-*.scope'").split()
        assert scopes, f"no container scope below {directory}"
        procs = vagrant.ssh(f"sudo cat {' '.join(s + '/cgroup.procs' for s in scopes)}").split()
        assert procs, f"no process in the container scopes {scopes}"


LOGIND_GET = "busctl get-property org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager"
LOGIND_EMIT = "sudo busctl emit /org/freedesktop/login1 org.freedesktop.login1.Manager PrepareForShutdown b"


def agent_lock(vagrant: Vagrant) -> str:
    """The agent's delay inhibitor lock as `systemd-inhibit --list` shows it (who, why, what, mode, its PID), or
    "" when it holds none."""
    pid = vagrant.ssh("systemctl show -p MainPID --value nodeagent.service").strip()
    listed = vagrant.ssh("systemd-inhibit --list --no-pager --no-legend", check=False)
    for line in listed.splitlines():
        fields = line.split()
        if "kubelet" in fields and pid in fields and "Kubelet needs time to handle node shutdown" in line:
            assert fields[-1] == "delay" and "shutdown" in fields, line
            return line
    return ""


def check_graceful_shutdown(vagrant: Vagrant) -> None:
    """Graceful node shutdown against the real logind: with shutdownGracePeriod 20s (5s of it for critical pods)
    the agent raises logind's InhibitDelayMaxUSec (Debian's is 5 s) through its drop-in and a reload, and holds a
    delay lock for shutdown. A PrepareForShutdown(true) sent as logind sends it (no real shutdown: the VM must
    stay up) makes it kill the BestEffort pod (its own 2 s, under the 15 s of its group; Failed, Terminated,
    DisruptionTarget) and let the lock go; a PrepareForShutdown(false), a cancelled shutdown, makes it take the
    lock again."""
    vagrant.ssh(
        "printf 'shutdownGracePeriod: 20s\\nshutdownGracePeriodCriticalPods: 5s\\n' | "
        "sudo tee -a /var/lib/kubelet/config.yaml >/dev/null && sudo systemctl restart nodeagent.service"
    )
    print(f"vm inhibitor: {wait_for('the agent holding a delay lock for shutdown', partial(agent_lock, vagrant), 600)}")
    assert vagrant.ssh(f"{LOGIND_GET} InhibitDelayMaxUSec").split() == ["t", "20000000"]
    assert "InhibitDelayMaxSec=20" in vagrant.ssh("cat /etc/systemd/logind.conf.d/99-kubelet.conf")

    vagrant.ssh(f"{LOGIND_EMIT} true")
    wait_for("the lock let go after the pods", lambda: not agent_lock(vagrant), 300)
    journal = agent_journal(vagrant)
    assert f"shutdown manager killing pod pod=default/besteffort-{NODE} grace_period=2" in journal, journal
    stopped = wait_for(
        "the BestEffort pod Failed",
        lambda: next(
            (
                p
                for p in pods(vagrant)
                if p["metadata"]["name"] == f"besteffort-{NODE}" and p["status"].get("phase") == "Failed"
            ),
            None,
        ),
        300,
    )
    status = stopped["status"]
    assert (status.get("reason"), status.get("message")) == (
        "Terminated",
        "Pod was terminated in response to imminent node shutdown.",
    ), status
    [target] = [c for c in status.get("conditions") or () if c["type"] == "DisruptionTarget"]
    assert (target["status"], target["reason"]) == ("True", "TerminationByKubelet"), target

    vagrant.ssh(f"{LOGIND_EMIT} false")
    wait_for("the lock taken again after the cancellation", partial(agent_lock, vagrant), 300)


def join_testbed(vagrant: SshVagrant, testbed: Testbed, threshold: int, directory: Path) -> None:
    """The agent restarted with the read-only port (the summary), the memory notifier, evictionHard
    memory.available at `threshold` bytes, and the testbed's apiserver (through the tunnel) as its cluster."""
    kubeconfig = base64.b64encode(vm_kubeconfig(testbed.layout.pki, directory).encode()).decode()
    config = (
        f"readOnlyPort: {READ_ONLY_PORT}\\nkernelMemcgNotification: true\\n"
        f"evictionHard:\\n  memory.available: {threshold // MIB}Mi\\n"
    )
    dropin = (
        "[Service]\\nExecStart=\\nExecStart=/opt/nodeagent/bin/nodeagent run --kubeconfig "
        "/etc/kubernetes/node.kubeconfig --config /var/lib/kubelet/config.yaml\\n"
    )
    vagrant.ssh(
        f"echo {kubeconfig} | base64 -d | sudo tee /etc/kubernetes/node.kubeconfig >/dev/null && "
        f"printf '{config}' | sudo tee -a /var/lib/kubelet/config.yaml >/dev/null && "
        "sudo mkdir -p /etc/systemd/system/nodeagent.service.d && "
        f"printf '{dropin}' | sudo tee /etc/systemd/system/nodeagent.service.d/10-cluster.conf >/dev/null && "
        "sudo systemctl daemon-reload && sudo systemctl restart nodeagent.service"
    )


def check_memory_eviction(vagrant: SshVagrant, admin: Path, threshold: int, timings: dict[str, float]) -> None:
    """A hog (dd holding a 640 MiB buffer, blocked on a pipe nobody reads) and a small pod from the apiserver:
    memory.available falls below evictionHard, the hog is evicted with upstream's status, the Node gets
    MemoryPressure, the small pod and the static pods stay."""
    # The hog outgrows the free memory by 128 MiB (at least 640 MiB, at most what leaves 160 MiB available), so the
    # kernel must reclaim page cache for it: memory stalls the PSI trigger may see.
    free, available = free_and_available(vagrant)
    size = min(max(640 * MIB, free + 128 * MIB), available - 160 * MIB)
    print(f"vm eviction: MemFree {free // MIB} MiB, memory.available {available // MIB} MiB, hog {size // MIB} MiB")
    assert available - size < threshold, (available, size, threshold)
    t = time.monotonic()
    hog = api_pod(
        "hog",
        f"dd if=/dev/zero bs={size} count=1 | sleep 100000",
        "    resources:\n      requests: {memory: 16Mi}\n      limits: {cpu: 200m}",
    )
    small = api_pod("small", "exec sleep 100000", "    resources:\n      requests: {memory: 32Mi}")
    kubectl(admin, "apply", "-f", "-", stdin=small + "---\n" + hog)
    evicted = wait(
        "the hog evicted",
        lambda: evicted_status(admin, "hog"),
        900,
    )
    timings["hog created to Evicted"] = time.monotonic() - t
    print(f"vm eviction hog status: {json.dumps(evicted)}")
    assert evicted["phase"] == "Failed", evicted
    message = evicted["message"]
    assert message.startswith("The node was low on resource: memory. Threshold quantity: "), message
    assert f"{threshold // MIB}Mi, available: " in message, message
    assert "Container main was using " in message and "request is 16Mi" in message, message
    [target] = [c for c in evicted.get("conditions") or () if c["type"] == "DisruptionTarget"]
    assert (target["status"], target["reason"]) == ("True", "TerminationByKubelet"), target
    # The node status manager posts the condition at its next update (10 s).
    pressure = wait("MemoryPressure True on the Node", lambda: pressure_condition(admin), 300)
    assert pressure["reason"] == "KubeletHasInsufficientMemory", pressure
    small_status = get_json(admin, "pod", "small")["status"]
    assert small_status.get("phase") == "Running", small_status
    for name in ("guaranteed", "besteffort"):
        assert running_pod(vagrant, f"{name}-{NODE}"), f"{name} no longer Running after the eviction"
    journal = vagrant.ssh("sudo journalctl -u nodeagent --no-pager | grep -i 'eviction\\|notif'", check=False)
    print(f"vm eviction journal:\n{journal}")
    assert "eviction manager evicting pod pod=default/hog" in journal, journal
    assert "eviction manager evicting pod pod=default/small" not in journal, journal
    assert (
        "created memory pressure notifier notifier=hard memory eviction threshold path=/proc/pressure/memory" in journal
    )
    assert (
        "created memory events notifier notifier=memory.events of the pods cgroup "
        "path=/sys/fs/cgroup/kubepods.slice/memory.events" in journal
    ), journal
    assert "armed memory events notifier path=/sys/fs/cgroup/kubepods.slice/memory.events" in journal, journal
    # Which woke the manager: a notifier (a "memory notification" naming the PSI stall or the memory.events
    # counters that moved) or its 10 s tick.
    fired = [line for line in journal.splitlines() if "eviction manager memory notification" in line]
    print(f"vm eviction: {'a notifier fired: ' + fired[0] if fired else 'no notification: found by the 10 s tick'}")
    for line in fired:
        assert is_notification(line), line


PSI_STALL = "memory pressure stall under the hard"
MEMORY_EVENTS = "memory.events of the pods cgroup moved: "


def is_notification(line: str) -> bool:
    """A wake-up from one of the v2 notifiers: a PSI trigger or the pods cgroup's memory.events."""
    return PSI_STALL in line or MEMORY_EVENTS in line


def notifications(vagrant: SshVagrant) -> list[str]:
    journal = vagrant.ssh("sudo journalctl -u nodeagent --no-pager | grep 'memory notification'", check=False)
    return journal.splitlines()


def check_psi_notifier(vagrant: SshVagrant, admin: Path, timings: dict[str, float]) -> None:
    """A PSI trigger firing for real: a pod limited to 24Mi rewrites a 48 MiB file in a loop, so its page cache
    is reclaimed in its own cgroup all the time (memcg direct reclaim, waiting on writeback: memory stalls, which
    PSI counts in the pod's cgroup and every ancestor, kubepods.slice and the root). The agent's trigger ("some"
    100 ms within 1 s) must wake the eviction manager ("memory notification ... memory pressure stall"), the
    summary must show the stall in the pod's memory PSI, and no threshold is met, so nothing is evicted.

    The same reclaim at the pod's limit bumps `max` in its memory.events and kubepods.slice's (hierarchical), so
    the memory.events notifier must wake the manager too ("memory.events of the pods cgroup moved: max+N"); and
    /metrics/cadvisor must carry the six PSI counters, the pod's container's memory "waiting" above zero."""
    before = len(notifications(vagrant))
    t = time.monotonic()
    staller = api_pod(
        "staller",
        "while true; do dd if=/dev/zero of=/tmp/f bs=1048576 count=48 2>/dev/null; done",
        "    resources:\n      requests: {memory: 24Mi}\n      limits: {memory: 24Mi}",
    )
    kubectl(admin, "apply", "-f", "-", stdin=staller)
    try:
        fired = wait("a PSI notification", lambda: [n for n in notifications(vagrant)[before:] if PSI_STALL in n], 300)
        timings["staller created to PSI notification"] = time.monotonic() - t
        print(f"vm psi notifications: {fired}")
        events = wait(
            "a memory.events notification",
            lambda: [n for n in notifications(vagrant)[before:] if MEMORY_EVENTS in n],
            300,
        )
        timings["staller created to memory.events notification"] = time.monotonic() - t
        print(f"vm memory.events notifications ({len(events)}): {events[:5]}")
        assert all(is_notification(line) for line in notifications(vagrant)[before:])
        assert all(f"{MEMORY_EVENTS}max+" in line for line in events), events
        uid = get_json(admin, "pod", "staller")["metadata"]["uid"]
        summary = json.loads(
            vagrant.ssh(
                f"python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{READ_ONLY_PORT}"
                "/stats/summary').read().decode())\""
            )
        )
        [stats] = [p for p in summary["pods"] if p["podRef"]["uid"] == uid]
        print(f"vm psi staller memory psi: {stats['memory'].get('psi')}")
        assert stats["memory"]["psi"]["some"]["total"] > 0, stats["memory"]
        check_cadvisor_psi(vagrant, uid)
        assert get_json(admin, "pod", "staller")["status"].get("reason") != "Evicted"
    finally:
        kubectl(admin, "delete", "pod", "staller", "--wait=false")


PSI_COUNTERS = tuple(
    f"container_pressure_{resource}_{kind}_seconds_total"
    for resource in ("cpu", "memory", "io")
    for kind in ("waiting", "stalled")
)


def check_cadvisor_psi(vagrant: SshVagrant, uid: str) -> None:
    """/metrics/cadvisor from the read-only port: the six PSI counters, each for the node's root cgroup and the
    staller's container (its scope), and the container's memory "waiting" above zero (it stalls on reclaim)."""
    text = vagrant.ssh(
        f"python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{READ_ONLY_PORT}"
        "/metrics/cadvisor').read().decode())\""
    )
    lines = [line for line in text.splitlines() if line.startswith("container_pressure_")]
    unit = to_systemd(f"/kubepods/burstable/pod{uid}").rsplit("/", 1)[-1]
    staller = [line for line in lines if 'pod="staller"' in line and 'container="main"' in line]
    print(f"vm cadvisor psi: {len(lines)} lines; the staller's container: {staller}")
    for name in PSI_COUNTERS:
        assert any(line.startswith(f'{name}{{container="",id="/",') for line in lines), (name, lines[:12])
        [mine] = [line for line in staller if line.startswith(name + "{")]
        assert unit in mine and "cri-containerd-" in mine, mine
    [waiting] = [line for line in staller if line.startswith("container_pressure_memory_waiting_seconds_total{")]
    assert float(waiting.split()[1]) > 0, waiting


def test_systemd_cgroup_driver_in_the_vm(
    tmp_path: Path, libvirt_host: tuple[LibvirtHost, Leftovers], testbed: Testbed
) -> None:
    host, _ = libvirt_host
    admin = testbed.layout.admin_kubeconfig
    timings: dict[str, float] = {}
    with booted_vm(tmp_path, host, timings, {"NODEAGENT_VM_CGROUP_DRIVER": "systemd"}) as (booted, work, _):
        vagrant = SshVagrant(booted, tmp_path / "ssh_config")
        assert vagrant.ssh("stat -fc %T /sys/fs/cgroup").strip() == "cgroup2fs"
        assert vagrant.ssh("ps -p 1 -o comm=").strip() == "systemd"
        assert "cgroupDriver: systemd" in vagrant.ssh("cat /var/lib/kubelet/config.yaml")
        assert "SystemdCgroup = true" in vagrant.ssh("cat /etc/containerd/config.toml")

        # evictionHard a margin below memory.available now: the pods to come use tens of MiB, the hog 640 MiB.
        available = available_now(vagrant)
        print(f"vm memory.available before the pods: {available // MIB} MiB")
        assert available >= 800 * MIB, available
        threshold = available - 300 * MIB
        tunnel = ApiTunnel(
            tmp_path / "ssh_config", testbed.settings.node_ip, testbed.settings.apiserver_port, tmp_path / "tunnel.log"
        )
        try:
            t = time.monotonic()
            join_testbed(vagrant, testbed, threshold, tmp_path)
            wait("the VM's Node Ready", lambda: node_ready(admin), 600)
            timings["agent joined the testbed (Node Ready)"] = time.monotonic() - t

            t = time.monotonic()
            for name, (resources, _, _, _) in PODS.items():
                (work / "manifests" / f"{name}.yaml").write_text(manifest(name, resources))
            vagrant.run("rsync")
            running: dict[str, dict[str, Any]] = {}
            for name in PODS:
                running[name] = wait_for(f"{name} Running", partial(running_pod, vagrant, f"{name}-{NODE}"), 900)
                timings[f"{name} Running (after rsync)"] = time.monotonic() - t
            t = time.monotonic()
            check_slices(vagrant, running)
            timings["slice checks"] = time.monotonic() - t
            print(vagrant.ssh("systemd-cgls --no-pager -u kubepods.slice", check=False))

            # /stats/summary against the cgroup files read around it (the first read primes the cpu rates).
            t = time.monotonic()
            read_summary(vagrant, running)
            reading = read_summary(vagrant, running)
            (tmp_path / "summary.json").write_text(json.dumps(reading, indent=1))
            print(f"vm summary node: {json.dumps(reading['summary']['node'])[:3000]}")
            check_summary(reading, running)
            timings["summary checks"] = time.monotonic() - t

            # The Burstable pod goes: its slice is stopped (systemd forgets a stopped transient unit) and its
            # cgroup is gone; the BestEffort pod's stays.
            t = time.monotonic()
            uid = running["burstable"]["metadata"]["uid"]
            unit = to_systemd(f"/kubepods/burstable/pod{uid}").rsplit("/", 1)[-1]
            (work / "manifests" / "burstable.yaml").unlink()
            vagrant.run("rsync")
            wait_for(
                "the Burstable pod gone",
                lambda: not any(p["metadata"]["name"] == f"burstable-{NODE}" for p in pods(vagrant)),
                600,
            )
            # `systemctl show` loads any valid slice name (an implicit, inactive slice "Slice /kubepods/..."), so
            # "gone" is: no longer among the loaded units, the transient unit's properties with it, and no cgroup.
            wait_for(f"{unit} stopped and its cgroup removed", partial(slice_gone, vagrant, unit), 300)
            timings["Burstable slice gone (after rsync)"] = time.monotonic() - t
            assert unit_show(vagrant, "kubepods-besteffort.slice").get("ActiveState") == "active"

            check_memory_eviction(vagrant, admin, threshold, timings)
            check_psi_notifier(vagrant, admin, timings)

            t = time.monotonic()
            check_graceful_shutdown(vagrant)
            timings["graceful node shutdown checks"] = time.monotonic() - t
        except AssertionError:
            print(f"nodeagent's journal:\n{agent_journal(vagrant)}")
            raise
        finally:
            tunnel.close()
