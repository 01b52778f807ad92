"""kubeadm on a v2 host (issue 31): `kubeadm init` in the Vagrant VM (Debian bookworm, systemd, cgroup v2, QEMU's
software emulation here) with nodeagent as the kubelet, started by systemd through kubeadm's own drop-in, and
kubeadm's default `cgroupDriver: systemd`.

The VM is offline: kubeadm and the control-plane images (built on the host as `cluster up` builds them, cached) are
copied in over ssh and imported into the VM's containerd under kubeadm's default names. The addons are skipped
(nodeagent/vm/kubeadm.py says why). Checked: kubeadm init exits 0; the apiserver serves (/readyz from the host, at
the VM's address); the Node (the VM) Ready; `kubectl get pods -A` shows the four control-plane mirror pods Running;
each static pod's cgroup is its `kubepods-burstable-pod<uid>.slice` under kubepods.slice with its containers'
`cri-containerd-<id>.scope` below, the slice an active systemd unit. Timings are printed (VM up, copy, import,
kubeadm init and each of its phases as kubeadm logged them, Node Ready) with the host's load.

Marked `vm`, deselected by default: `python3 -m pytest -m vm tests/integration/test_vm_kubeadm.py -s`.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from nodeagent.kuberuntime.systemd_cgroup_names import to_systemd
from nodeagent.testbed.controlplaneimages import build_control_plane_images
from nodeagent.testbed.images import write_oci_archive
from nodeagent.testbed.kubeadm import kubeadm_path
from nodeagent.vm import kubeadm
from nodeagent.vm.host import Leftovers, LibvirtHost
from tests.integration.test_vm_systemd_cgroups import SshVagrant, unit_show
from tests.integration.test_vm_vagrant import NODE, booted_vm, libvirt_host, wait_for

pytestmark = [pytest.mark.vm, pytest.mark.timeout(3600)]

__all__ = ["libvirt_host"]  # the fixture, shared

INIT_TIMEOUT = 2400.0
REMOTE = "/var/tmp/kubeadm-vm"
STATIC_PODS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def scp(vagrant: SshVagrant, sources: list[Path], dest: str) -> None:
    subprocess.run(
        ["scp", "-q", "-F", str(vagrant.config), *map(str, sources), f"default:{dest}"],
        check=True,
        timeout=1800,
    )


def host_kubectl(admin: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(admin), "--request-timeout=60s", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def node_ready(admin: Path) -> dict[str, Any] | None:
    proc = host_kubectl(admin, "get", "node", NODE, "-o", "json")
    if proc.returncode != 0:
        return None
    node: dict[str, Any] = json.loads(proc.stdout)
    ready = [c for c in node["status"].get("conditions") or () if c["type"] == "Ready"]
    return node if ready and ready[0]["status"] == "True" else None


def control_plane_running(admin: Path) -> list[dict[str, Any]] | None:
    proc = host_kubectl(admin, "get", "pods", "-n", "kube-system", "-o", "json")
    if proc.returncode != 0:
        return None
    found = {p["metadata"]["name"]: p for p in json.loads(proc.stdout)["items"]}
    wanted = [found.get(f"{name}-{NODE}") for name in STATIC_PODS]
    if all(p is not None and p["status"].get("phase") == "Running" for p in wanted):
        return [p for p in wanted if p is not None]
    return None


def phase_lines(log: str) -> list[str]:
    """The lines of kubeadm's output that start a phase or report a wait."""
    marks = ("[preflight]", "[certs] Using", "[kubeconfig] Writing", "[kubelet-start]", "[control-plane] Creating",
             "[etcd] Creating", "[wait-control-plane]", "[kubelet-check]", "[control-plane-check]",
             "[upload-config]", "[upload-certs]", "[mark-control-plane]", "[bootstrap-token]",
             "[kubelet-finalize]", "[addons]", "Your Kubernetes control-plane")  # fmt: skip
    return [line for line in log.splitlines() if any(m in line for m in marks)]


def check_pod_cgroup(vagrant: SshVagrant, pod: dict[str, Any]) -> None:
    """The static pod's slice (its UID is the config hash the mirror pod carries) under kubepods.slice, active, with
    a container scope below it."""
    uid = pod["metadata"]["annotations"]["kubernetes.io/config.mirror"]
    qos = pod["status"]["qosClass"].lower()
    assert qos == "burstable", (pod["metadata"]["name"], qos)
    cgroup = to_systemd(f"/kubepods/{qos}/pod{uid}")
    assert cgroup.startswith("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"), cgroup
    unit = cgroup.rsplit("/", 1)[-1]
    shown = unit_show(vagrant, unit)
    print(f"vm kubeadm {pod['metadata']['name']}: {unit} {shown}")
    assert shown.get("ActiveState") == "active", shown
    assert shown.get("ControlGroup") == cgroup, shown
    scopes = vagrant.ssh(f"ls /sys/fs/cgroup{cgroup}").split()
    assert any(s.startswith("cri-containerd-") and s.endswith(".scope") for s in scopes), scopes
    procs = vagrant.ssh(f"cat /sys/fs/cgroup{cgroup}/cri-containerd-*.scope/cgroup.procs").split()
    assert procs, f"no process in {cgroup}'s scopes"


def test_kubeadm_init_in_the_vm(tmp_path: Path, libvirt_host: tuple[LibvirtHost, Leftovers]) -> None:
    host, _ = libvirt_host
    timings: dict[str, float] = {}
    print(f"\nvm kubeadm host load at start: {load()}")
    # On the host, cached: kubeadm (built by `nodeagent testbed install`) and the control-plane images.
    t = time.monotonic()
    kubeadm_binary = kubeadm_path()
    assert kubeadm_binary.is_file(), f"{kubeadm_binary} missing: `nodeagent cluster up` builds it"
    built = {image.repository: image for image in build_control_plane_images()}
    refs = kubeadm.image_refs(built["etcd"].tag, built["pause"].tag)
    tars = [write_oci_archive(built[name].image, tmp_path / f"{name}.tar", name=ref) for name, ref in refs.items()]
    timings["image tars on the host"] = time.monotonic() - t
    print(f"vm kubeadm images: {refs}; {sum(p.stat().st_size for p in tars) // 2**20} MiB of tars")

    with booted_vm(tmp_path, host, timings, {"NODEAGENT_VM_CGROUP_DRIVER": "systemd"}) as (booted, _, _):
        vagrant = SshVagrant(booted, tmp_path / "ssh_config")
        print(f"vm kubeadm host load after vagrant up: {load()}")
        assert vagrant.ssh("stat -fc %T /sys/fs/cgroup").strip() == "cgroup2fs"
        assert vagrant.ssh("ps -p 1 -o comm=").strip() == "systemd"
        address = vagrant.ssh("ip -4 -o addr show eth0").split()[3].split("/")[0]
        try:
            t = time.monotonic()
            vagrant.ssh(f"sudo install -d -o vagrant {REMOTE}")
            scp(vagrant, [kubeadm_binary, *tars], REMOTE)
            timings["copy kubeadm and the image tars in"] = time.monotonic() - t

            t = time.monotonic()
            vagrant.ssh(f'for t in {REMOTE}/*.tar; do sudo ctr -n k8s.io images import "$t" || exit 1; done')
            timings["image import (ctr)"] = time.monotonic() - t
            listed = vagrant.ssh("sudo crictl images -o json")
            tags = {tag for image in json.loads(listed)["images"] for tag in image.get("repoTags") or ()}
            assert set(refs.values()) <= tags, (refs, tags)

            # The standalone agent of provisioning gives way to the kubelet unit kubeadm drives.
            (tmp_path / "kubelet.service").write_text(kubeadm.KUBELET_UNIT)
            (tmp_path / "10-kubeadm.conf").write_text(kubeadm.KUBEADM_DROP_IN)
            (tmp_path / "kubeadm.yaml").write_text(
                kubeadm.init_config(node_name=NODE, address=address, etcd_tag=built["etcd"].tag)
            )
            scp(
                vagrant,
                [tmp_path / "kubelet.service", tmp_path / "10-kubeadm.conf", tmp_path / "kubeadm.yaml"],
                REMOTE,
            )
            vagrant.ssh(
                "sudo systemctl disable --now nodeagent.service && "
                "sudo rm -f /var/lib/kubelet/config.yaml && "
                f"sudo install -m 0755 {REMOTE}/kubeadm /usr/local/bin/kubeadm && "
                "sudo ln -sf /opt/nodeagent/bin/kubelet /usr/local/bin/kubelet && "
                f"sudo install -m 0644 {REMOTE}/kubelet.service /etc/systemd/system/kubelet.service && "
                "sudo install -d /etc/systemd/system/kubelet.service.d && "
                f"sudo install -m 0644 {REMOTE}/10-kubeadm.conf /etc/systemd/system/kubelet.service.d/10-kubeadm.conf"
                " && sudo systemctl daemon-reload && sudo systemctl enable kubelet.service && "
                # kubeadm's preflight wants forwarding on (the CNI bridge turns it on at the first pod anyway).
                "sudo sysctl -qw net.ipv4.ip_forward=1"
            )

            # kubeadm init as a transient unit (it outlives any one ssh call). Its output is kept as is: at --v=1
            # most lines carry klog's time (stamping each line with date(1) lagged minutes behind under TCG).
            # `$$?`: systemd expands $NAME and ${NAME} in a unit's command line itself (the first run lost kubeadm's
            # exit status to that: `${PIPESTATUS[0]}` became empty).
            argv = " ".join(kubeadm.init_argv(f"{REMOTE}/kubeadm.yaml"))
            script = f"{argv} > {REMOTE}/init.log 2>&1; echo $$? > {REMOTE}/init.rc"
            t = time.monotonic()
            vagrant.ssh(f"sudo systemd-run --unit kubeadm-init --collect /bin/bash -c '{script}'")
            rc = wait_for(
                "kubeadm init to finish",
                lambda: vagrant.ssh(f"cat {REMOTE}/init.rc 2>/dev/null", check=False).strip(),
                INIT_TIMEOUT,
                interval=15,
            )
            timings["kubeadm init"] = time.monotonic() - t
            log = vagrant.ssh(f"cat {REMOTE}/init.log", check=False)
            (tmp_path / "kubeadm-init.log").write_text(log)
            print(f"vm kubeadm host load after init: {load()}")
            print("vm kubeadm init phases:\n" + "\n".join(phase_lines(log)))
            assert rc == "0", f"kubeadm init exited {rc}:\n{log[-6000:]}"

            admin = tmp_path / "admin.conf"
            admin.write_text(vagrant.ssh("sudo cat /etc/kubernetes/admin.conf"))
            readyz = host_kubectl(admin, "get", "--raw", "/readyz")
            assert (readyz.returncode, readyz.stdout.strip()) == (0, "ok"), readyz
            t = time.monotonic()
            node = wait_for("the Node Ready", lambda: node_ready(admin), 900, interval=10)
            timings["Node Ready after init"] = time.monotonic() - t
            print(f"vm kubeadm node: {json.dumps(node['status'].get('nodeInfo'))}")
            running = wait_for("the control-plane mirror pods Running", lambda: control_plane_running(admin), 900)
            timings["mirror pods Running after init"] = time.monotonic() - t
            print(host_kubectl(admin, "get", "pods", "-A", "-o", "wide").stdout)
            config = vagrant.ssh("sudo cat /var/lib/kubelet/config.yaml")
            assert "cgroupDriver: systemd" in config, config
            for pod in running:
                check_pod_cgroup(vagrant, pod)
            print(vagrant.ssh("systemd-cgls --no-pager -u kubepods.slice", check=False))
        except BaseException:
            journal = vagrant.ssh("sudo journalctl -u kubelet --no-pager -n 300", check=False)
            print(f"vm kubeadm kubelet journal:\n{journal}")
            print(vagrant.ssh(f"sudo cat {REMOTE}/init.log", check=False)[-8000:])
            print(vagrant.ssh("sudo crictl ps -a; free -m; uptime", check=False))
            raise
        finally:
            print(f"vm kubeadm host load at the end: {load()} (pid {os.getpid()})")
