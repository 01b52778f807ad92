"""The Vagrant VM for static pods, for real: box (cached), `vagrant up`, manifests synced from the host, destroy.

Marked `vm` and deselected by default (pyproject addopts): it boots a VM under QEMU's software emulation on hosts
without usable KVM and takes several minutes. Run it with
`python3 -m pytest -m vm tests/integration/test_vm_vagrant.py -s`.
It prints its timings (box build or cache, up, first static pod Running, destroy).

Nothing is mocked: a real libvirtd (ours when none runs), a real Vagrant with vagrant-libvirt, the box built by
`nodeagent vm box`'s code, the Vagrantfile and provision.sh from vagrant/, nodeagent's wheel from this checkout.
Everything the test makes goes away even when it fails: the VM, its network, the storage pool and its volumes, the
temp VAGRANT_HOME, and libvirt's iptables chains; the test checks that none is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.vm.box import BOX_NAME, BUSYBOX_IMAGE, VAGRANT_DIR, build_box
from nodeagent.vm.command import add_box
from nodeagent.vm.host import Leftovers, LibvirtHost, choose_network

pytestmark = [pytest.mark.vm, pytest.mark.timeout(3000)]

NODE = "nodeagent-vm"  # the box's hostname: static pods are named <name>-<node>
LIBVIRT_TOP_LEVEL = re.compile(
    r"^(:LIBVIRT_[A-Z]+ - \[\d+:\d+\]|-A (INPUT|OUTPUT|FORWARD|POSTROUTING) -j LIBVIRT_[A-Z]+)$"
)


def good_manifest(message: str) -> str:
    return f"""apiVersion: v1
kind: Pod
metadata:
  name: good
  namespace: default
spec:
  containers:
  - name: main
    image: {BUSYBOX_IMAGE}
    imagePullPolicy: Never
    command: ["sh", "-c", "echo {message}; exec sleep 100000"]
  terminationGracePeriodSeconds: 2
"""


# A pod without containers: valid YAML, invalid pod ("spec.containers: Required value").
BROKEN_MANIFEST = """apiVersion: v1
kind: Pod
metadata:
  name: broken
spec:
  containers: []
"""


class Vagrant:
    def __init__(self, cwd: Path, env: dict[str, str], log: Path) -> None:
        self.cwd, self.env, self.log = cwd, env, log

    def run(self, *args: str, timeout: float = 1200, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["vagrant", *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
        with self.log.open("a") as f:
            f.write(f"$ vagrant {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}\n")
        if check and proc.returncode != 0:
            raise AssertionError(
                f"vagrant {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return proc

    def ssh(self, command: str, check: bool = True) -> str:
        return self.run("ssh", "-c", command, timeout=300, check=check).stdout


def wait_for(what: str, probe: Callable[[], Any], timeout: float, interval: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}")


def pods(vagrant: Vagrant) -> list[dict[str, Any]]:
    out = vagrant.ssh("sudo nodeagent pods -o json", check=False)
    try:
        items = json.loads(out).get("items") or []
    except ValueError:
        return []
    return [p for p in items if isinstance(p, dict)]


def running_pod(vagrant: Vagrant, name: str, not_uid: str = "") -> dict[str, Any] | None:
    for pod in pods(vagrant):
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        if meta.get("name") == name and meta.get("uid") != not_uid and status.get("phase") == "Running":
            statuses = status.get("containerStatuses") or []
            if statuses and all("running" in (s.get("state") or {}) for s in statuses):
                return pod
    return None


@pytest.fixture
def libvirt_host(tmp_path: Path) -> Iterator[tuple[LibvirtHost, Leftovers]]:
    before = Leftovers.snapshot(libvirt=False)
    host = LibvirtHost(pool_name=f"nodeagent-vm-{os.getpid()}", pool_dir=tmp_path / "pool")
    try:
        with host.prepared():
            yield host, before
    finally:
        # The box's copies (Vagrant's box store, the pool's volume) are over a GiB: never left in pytest's tmp.
        shutil.rmtree(tmp_path / "vagrant.d", ignore_errors=True)
        shutil.rmtree(tmp_path / "pool", ignore_errors=True)
    after = Leftovers.snapshot(libvirt=False)
    assert after.new_since(before) == {}, f"left behind: {after.new_since(before)}"


@contextlib.contextmanager
def booted_vm(
    tmp_path: Path, host: LibvirtHost, timings: dict[str, float], extra_env: dict[str, str] | None = None
) -> Iterator[tuple[Vagrant, Path, Leftovers]]:
    """The box (built or cached) added to a VAGRANT_HOME of the test's, `vagrant up` from a copy of vagrant/, and,
    whatever the test does, `vagrant destroy` and the timings printed; once the test passed, nothing of libvirt's
    left behind. Yields the VM, its working directory (manifests/ is synced) and libvirt's state before.
    `extra_env` goes to Vagrant (NODEAGENT_VM_CGROUP_DRIVER, for provisioning)."""
    libvirt_before = Leftovers.snapshot()
    t = time.monotonic()
    box = build_box()
    timings["box (build or cache)"] = time.monotonic() - t
    work = tmp_path / "vagrant"
    work.mkdir()
    shutil.copy2(VAGRANT_DIR / "Vagrantfile", work / "Vagrantfile")
    shutil.copy2(VAGRANT_DIR / "provision.sh", work / "provision.sh")
    (work / "manifests").mkdir()
    env = {
        **os.environ,
        "VAGRANT_HOME": str(tmp_path / "vagrant.d"),
        "VAGRANT_CHECKPOINT_DISABLE": "1",
        "VAGRANT_DEFAULT_PROVIDER": "libvirt",
        "NODEAGENT_VM_CHECKOUT": str(VAGRANT_DIR.parent),
        "NODEAGENT_VM_NETWORK": choose_network(tmp_path),
        "NODEAGENT_VM_POOL": host.pool_name,
        "NODEAGENT_VM_CONSOLE_LOG": str(tmp_path / "console.log"),
        **(extra_env or {}),
    }
    vagrant = Vagrant(work, env, tmp_path / "vagrant.log")
    print(f"\nvm test dir={tmp_path} network={env['NODEAGENT_VM_NETWORK']}")
    t = time.monotonic()
    add_box(box.archive, BOX_NAME, env)
    timings["box add"] = time.monotonic() - t
    try:
        t = time.monotonic()
        vagrant.run("up", "--provider", "libvirt")
        timings["vagrant up"] = time.monotonic() - t
        yield vagrant, work, libvirt_before
    finally:
        t = time.monotonic()
        vagrant.run("destroy", "-f", check=False)
        timings["vagrant destroy"] = time.monotonic() - t
        for step, seconds in timings.items():
            print(f"vm timing {step}: {seconds:.1f} s")
    left = Leftovers.snapshot().new_since(libvirt_before)
    left.pop("pools", None)  # the fixture's own pool, removed by the fixture (checked there)
    # libvirtd's own top-level chains (empty, jumped to from INPUT/FORWARD/...) live as long as libvirtd; the fixture
    # removes them once it has stopped ours, and checks that. Any rule of the VM's network must be gone already.
    rules = [r for r in left.pop("iptables", []) if not LIBVIRT_TOP_LEVEL.match(r)]
    if rules:
        left["iptables"] = rules
    assert left == {}, f"left behind after destroy: {left}"


def test_static_pods_in_a_vagrant_vm(tmp_path: Path, libvirt_host: tuple[LibvirtHost, Leftovers]) -> None:
    host, _ = libvirt_host
    timings: dict[str, float] = {}
    with booted_vm(tmp_path, host, timings) as (vagrant, work, libvirt_before):
        # A second `up` changes nothing: the same boot, the same agent process, no second provisioning.
        state = "cat /proc/sys/kernel/random/boot_id; systemctl show -p MainPID --value nodeagent"
        booted = vagrant.ssh(state)
        again = vagrant.run("up")
        assert "already provisioned" in again.stdout, again.stdout
        assert vagrant.ssh(state) == booted
        domains = Leftovers.snapshot().new_since(libvirt_before).get("domains", [])
        assert len(domains) == 1, domains

        # Manifests saved on the host reach the VM's staticPodPath through `vagrant rsync`.
        t = time.monotonic()
        (work / "manifests" / "good.yaml").write_text(good_manifest("first"))
        (work / "manifests" / "broken.yaml").write_text(BROKEN_MANIFEST)
        vagrant.run("rsync")
        first = wait_for("the good static pod Running", lambda: running_pod(vagrant, f"good-{NODE}"), timeout=900)
        timings["first static pod Running (after rsync)"] = time.monotonic() - t
        assert vagrant.ssh("sudo nodeagent pods").count(f"good-{NODE}") == 1
        # The VM is a modern host (issue 31): the unified cgroup v2 hierarchy under systemd. The pod (BestEffort) has
        # its cgroup in upstream's cgroupfs layout, with the controllers its values need enabled down to it, and
        # BestEffort's weight (2 shares -> cpu.weight 1). The longer test_vm_cgroup_v2 checks all three QoS classes.
        assert vagrant.ssh("stat -fc %T /sys/fs/cgroup").strip() == "cgroup2fs"
        assert vagrant.ssh("ps -p 1 -o comm=").strip() == "systemd"
        pod_cgroup = f"/sys/fs/cgroup/kubepods/besteffort/pod{first['metadata']['uid']}"
        controllers = set(vagrant.ssh(f"cat {pod_cgroup}/cgroup.controllers").split())
        assert {"cpu", "memory", "pids"} <= controllers, controllers
        assert vagrant.ssh(f"cat {pod_cgroup}/cpu.weight").strip() == "1"

        # The broken one is reported, as the agent reports an unusable manifest (agent.py's problem sink).
        reported = wait_for(
            "the broken manifest reported",
            lambda: vagrant.ssh(
                "sudo journalctl -u nodeagent --no-pager | grep 'static pod manifest ignored' | grep broken.yaml",
                check=False,
            ).strip(),
            timeout=300,
        )
        assert "spec.containers" in reported, reported
        assert not any((p.get("metadata") or {}).get("name", "").startswith("broken") for p in pods(vagrant))
        crictl = vagrant.ssh("sudo crictl pods --name good -q")
        assert crictl.strip(), "crictl shows no sandbox for the good pod"

        # An edit replaces the pod: a new UID (the manifest's hash) running the new command.
        t = time.monotonic()
        old_uid = str(first["metadata"]["uid"])
        (work / "manifests" / "good.yaml").write_text(good_manifest("second"))
        vagrant.run("rsync")
        edited = wait_for(
            "the edited pod Running",
            lambda: running_pod(vagrant, f"good-{NODE}", not_uid=old_uid),
            timeout=600,
        )
        assert "second" in json.dumps(edited["spec"]["containers"][0]["command"])
        timings["edit to Running"] = time.monotonic() - t

        # Removing the manifest removes the pod and its sandbox.
        t = time.monotonic()
        (work / "manifests" / "good.yaml").unlink()
        vagrant.run("rsync")
        wait_for(
            "the good pod gone",
            lambda: not any((p.get("metadata") or {}).get("name") == f"good-{NODE}" for p in pods(vagrant)),
            timeout=600,
        )
        wait_for(
            "the good pod's sandbox gone",
            lambda: vagrant.ssh("sudo crictl pods --name good -q", check=False).strip() == "",
            timeout=300,
        )
        timings["remove to gone"] = time.monotonic() - t
