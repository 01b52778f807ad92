"""What CI checks of the Vagrant VM without booting one (fast, never skipped): the Vagrantfile validates, and
vagrant/provision.sh, run as root in a Debian chroot, installs the wheel built from this checkout and writes the
KubeletConfiguration, containerd's and CNI's config and the systemd units, idempotently.

The full VM run is tests/integration/test_vm_vagrant.py (marker `vm`, deselected by default).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.config import CgroupDriver, load_config
from nodeagent.vm.box import VAGRANT_DIR
from nodeagent.vm.chroot import rootfs_tar


def _vagrant_dir(tmp_path: Path) -> Path:
    """A copy of vagrant/, so that Vagrant's state (.vagrant/) never lands in the checkout."""
    work = tmp_path / "vagrant"
    work.mkdir()
    for name in ("Vagrantfile", "provision.sh"):
        shutil.copy2(VAGRANT_DIR / name, work / name)
    (work / "manifests").mkdir()
    return work


def _vagrant_env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "VAGRANT_HOME": str(tmp_path / "vagrant.d"),
        "VAGRANT_CHECKPOINT_DISABLE": "1",
        "NODEAGENT_VM_CHECKOUT": str(VAGRANT_DIR.parent),
        "NODEAGENT_VM_NETWORK": "198.18.250.0/24",
    }


def test_vagrantfile_validates(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["vagrant", "validate"],
        cwd=_vagrant_dir(tmp_path),
        env=_vagrant_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Vagrantfile validated successfully" in proc.stdout


def test_vagrantfile_refuses_a_forbidden_management_network(tmp_path: Path) -> None:
    env = {**_vagrant_env(tmp_path), "NODEAGENT_VM_NETWORK": "192.168.121.0/24"}
    proc = subprocess.run(
        ["vagrant", "validate"],
        cwd=_vagrant_dir(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "198.18.0.0/16" in proc.stdout + proc.stderr


def _chroot(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["chroot", str(root), *args], capture_output=True, text=True, check=False, timeout=600)


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """The provisioning rootfs, extracted; removed afterwards (a few hundred MiB)."""
    root = tmp_path / "root"
    root.mkdir()
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_provision_script_in_a_chroot(root: Path) -> None:
    subprocess.run(["tar", "-xpf", str(rootfs_tar()), "-C", str(root), "--numeric-owner"], check=True)
    assert _chroot(root, "python3", "-m", "venv", "/opt/nodeagent").returncode == 0
    dist = root / "vagrant" / "dist"
    build = ["python3", "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir"]
    wheel = subprocess.run(
        [*build, str(dist), str(VAGRANT_DIR.parent)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert wheel.returncode == 0, wheel.stderr
    shutil.copy2(VAGRANT_DIR / "provision.sh", root / "provision.sh")

    first = _chroot(root, "/bin/sh", "/provision.sh", "/vagrant/dist")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "systemd is not running (chroot)" in first.stdout

    # The wheel from this checkout, in the venv, on PATH.
    site = next((root / "opt" / "nodeagent" / "lib").glob("python3*/site-packages"))
    assert (site / "nodeagent" / "vm" / "chroot.py").read_bytes() == Path(__file__).parents[2].joinpath(
        "nodeagent", "vm", "chroot.py"
    ).read_bytes()
    assert os.readlink(root / "usr" / "local" / "bin" / "nodeagent") == "/opt/nodeagent/bin/nodeagent"

    # A KubeletConfiguration nodeagent itself accepts, with the static pod path the VM's manifests/ syncs into.
    config = load_config(root / "var" / "lib" / "kubelet" / "config.yaml").config
    assert config.static_pod_path == "/etc/kubernetes/manifests"
    assert (root / "etc" / "kubernetes" / "manifests").is_dir()
    containerd = (root / "etc" / "containerd" / "config.toml").read_text()
    assert 'sandbox_image = "nodeagent.local/pause:3.10"' in containerd
    assert "SystemdCgroup = false" in containerd
    cni = json.loads((root / "etc" / "cni" / "net.d" / "10-nodeagent.conflist").read_text())
    assert cni["plugins"][0]["ipam"]["ranges"][0][0]["subnet"] == "198.19.255.0/24"

    # The units, enabled: the agent standalone, after containerd and the image import.
    unit = (root / "etc" / "systemd" / "system" / "nodeagent.service").read_text()
    assert "ExecStart=/opt/nodeagent/bin/nodeagent run --standalone --config /var/lib/kubelet/config.yaml" in unit
    wants = root / "etc" / "systemd" / "system" / "multi-user.target.wants"
    for name in ("nodeagent.service", "nodeagent-images.service", "containerd.service"):
        assert (wants / name).is_symlink(), name

    # A second run changes no file (idempotent), and a missing wheel is a clear error.
    written = [
        root / "var/lib/kubelet/config.yaml",
        root / "etc/containerd/config.toml",
        root / "etc/systemd/system/nodeagent.service",
    ]
    mtimes = [p.stat().st_mtime_ns for p in written]
    second = _chroot(root, "/bin/sh", "/provision.sh", "/vagrant/dist")
    assert second.returncode == 0, second.stderr
    assert [p.stat().st_mtime_ns for p in written] == mtimes
    missing = _chroot(root, "/bin/sh", "/provision.sh", "/nowhere")
    assert missing.returncode == 1
    assert "no nodeagent wheel in /nowhere" in missing.stderr

    # NODEAGENT_VM_CGROUP_DRIVER=systemd (the Vagrantfile passes it on): the agent's cgroupDriver and containerd's
    # runc option move together; anything else is refused before anything is written.
    systemd = _chroot(root, "env", "NODEAGENT_VM_CGROUP_DRIVER=systemd", "/bin/sh", "/provision.sh", "/vagrant/dist")
    assert systemd.returncode == 0, systemd.stdout + systemd.stderr
    assert load_config(root / "var" / "lib" / "kubelet" / "config.yaml").config.cgroup_driver == CgroupDriver.SYSTEMD
    assert "SystemdCgroup = true" in (root / "etc" / "containerd" / "config.toml").read_text()
    wrong = _chroot(root, "env", "NODEAGENT_VM_CGROUP_DRIVER=System", "/bin/sh", "/provision.sh", "/vagrant/dist")
    assert wrong.returncode == 1
    assert "NODEAGENT_VM_CGROUP_DRIVER must be cgroupfs or systemd, not 'System'" in wrong.stderr
