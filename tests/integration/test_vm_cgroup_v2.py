"""Pod cgroups on a real cgroup v2 host (issue 31, cgroupfs driver): the Vagrant VM (Debian bookworm, systemd as PID
1, the unified hierarchy) runs a Guaranteed, a Burstable and a BestEffort static pod, and their cgroup files are read
inside the VM: the layout (`kubepods[/<qos>]/pod<uid>`), the controllers enabled down to each, and upstream's values.

Marked `vm` like test_vm_vagrant.py, whose VM plumbing it shares (QEMU software emulation here: minutes). Run it with
`python3 -m pytest -m vm tests/integration/test_vm_cgroup_v2.py -s`; it prints its timings.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from nodeagent.vm.box import BUSYBOX_IMAGE
from nodeagent.vm.host import Leftovers, LibvirtHost
from tests.integration.test_vm_vagrant import (
    NODE,
    Vagrant,
    booted_vm,
    libvirt_host,
    pods,
    running_pod,
    wait_for,
)

pytestmark = [pytest.mark.vm, pytest.mark.timeout(3000)]

__all__ = ["libvirt_host"]  # the fixture, shared


def manifest(name: str, resources: str) -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  containers:
  - name: main
    image: {BUSYBOX_IMAGE}
    imagePullPolicy: Never
    command: ["sh", "-c", "exec sleep 100000"]
{resources}
  terminationGracePeriodSeconds: 2
"""


GUARANTEED = """    resources:
      requests: {cpu: 100m, memory: 32Mi}
      limits: {cpu: 100m, memory: 32Mi}"""
BURSTABLE = """    resources:
      requests: {cpu: 50m}
      limits: {memory: 64Mi}"""

# name -> (manifest resources, QoS tier directory, the pod cgroup's files as upstream leaves them). cpu.weight from
# the requests' shares (102 -> 4, 51 -> 2, 2 -> 1); cpu.max and memory.max only from declared limits, the kernel's
# defaults ("max 100000", "max") otherwise; pids.max not set (no podPidsLimit); memory.high never (MemoryQoS off).
PODS: dict[str, tuple[str, str, dict[str, str]]] = {
    "guaranteed": (
        GUARANTEED,
        "kubepods",
        {"cpu.weight": "4", "cpu.max": "10000 100000", "memory.max": "33554432", "memory.high": "max"},
    ),
    "burstable": (
        BURSTABLE,
        "kubepods/burstable",
        {"cpu.weight": "2", "cpu.max": "max 100000", "memory.max": "67108864", "memory.high": "max"},
    ),
    "besteffort": (
        "",
        "kubepods/besteffort",
        {"cpu.weight": "1", "cpu.max": "max 100000", "memory.max": "max", "memory.high": "max"},
    ),
}
FILES = ("cgroup.controllers", "cpu.weight", "cpu.max", "memory.max", "memory.high", "pids.max")


def read_files(vagrant: Vagrant, directory: str) -> dict[str, str]:
    script = "; ".join(f"echo {name}=$(cat {directory}/{name})" for name in FILES)
    out = vagrant.ssh(f"sudo sh -c '{script}'")
    return dict(line.split("=", 1) for line in out.strip().splitlines() if "=" in line)


def test_pod_cgroups_on_cgroup_v2_in_the_vm(tmp_path: Path, libvirt_host: tuple[LibvirtHost, Leftovers]) -> None:
    host, _ = libvirt_host
    timings: dict[str, float] = {}
    with booted_vm(tmp_path, host, timings) as (vagrant, work, _):
        # The host is what the issue is about: cgroup v2 (the unified hierarchy) under systemd as PID 1.
        assert vagrant.ssh("stat -fc %T /sys/fs/cgroup").strip() == "cgroup2fs"
        assert vagrant.ssh("ps -p 1 -o comm=").strip() == "systemd"

        t = time.monotonic()
        for name, (resources, _, _) in PODS.items():
            (work / "manifests" / f"{name}.yaml").write_text(manifest(name, resources))
        vagrant.run("rsync")
        running: dict[str, dict[str, Any]] = {}
        for name in PODS:
            running[name] = wait_for(f"{name} Running", partial(running_pod, vagrant, f"{name}-{NODE}"), 900)
            timings[f"{name} Running (after rsync)"] = time.monotonic() - t

        root_controllers = set(vagrant.ssh("cat /sys/fs/cgroup/cgroup.controllers").split())
        assert {"cpu", "memory", "pids"} <= root_controllers, root_controllers
        for name, (_, tier, expected) in PODS.items():
            pod = running[name]
            assert pod["status"]["qosClass"].lower() == name, pod["status"].get("qosClass")
            directory = f"/sys/fs/cgroup/{tier}/pod{pod['metadata']['uid']}"
            files = read_files(vagrant, directory)
            print(f"vm cgroup {name} {directory}: {files}")
            # The controllers reached the pod cgroup (kubepods and its tier enabled them), so its values exist.
            assert {"cpu", "memory", "pids"} <= set(files.get("cgroup.controllers", "").split()), files
            assert {k: files.get(k) for k in expected} == expected, files
            assert files.get("pids.max") == "max", files
            # runc put the container below the pod cgroup, as upstream's layout has it.
            below = vagrant.ssh(f"sudo find {directory} -mindepth 1 -maxdepth 1 -type d").split()
            assert below, f"no container cgroup below {directory}"
        assert len(pods(vagrant)) == len(PODS)
