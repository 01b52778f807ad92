"""The local Debian box for the Vagrant VM, built on this host from the Debian mirror (`nodeagent vm box`).

Everything slow is installed here, at host speed in a chroot, because inside a TCG VM everything runs about 24x
slower: containerd (trixie's 1.7, as the testbed), runc, the reference CNI plugins, python3 with a venv holding
nodeagent's dependencies as wheels, crictl, and the pause and busybox images as `ctr import` tars. The VM gets
nothing from the Internet (its network is isolated); provisioning only installs the nodeagent wheel.

Steps: mmdebstrap (minbase) into a tar; a sparse raw disk on a loop device, one partition made visible with
`partx -a` (`losetup -P` makes no partition nodes on these hosts), ext4 labelled `rootfs`; the tar extracted, the
customisation done with chroot; `grub-install --target=i386-pc` in the chroot and a grub.cfg written by hand with
`root=LABEL=rootfs` (grub-mkconfig without udev names /dev/loop0p1); then qcow2 and a libvirt box (metadata.json,
box.img, Vagrantfile) tarred as `nodeagent.box`.

The box is cached under /var/cache/nodeagent/vm/box-<hash>/, the hash covering this recipe and its inputs. It is
built in a temp directory and renamed when complete, so a half-built box is never reused.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from nodeagent.testbed.configs import BUSYBOX_IMAGE_TAG, PAUSE_IMAGE_TAG
from nodeagent.testbed.images import build_busybox_image, build_pause_image, write_oci_archive
from nodeagent.testbed.versions import cache_root, crictl_path
from nodeagent.vm.errors import VMError

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
VAGRANT_DIR = REPO / "vagrant"
CUSTOMIZE_SCRIPT = VAGRANT_DIR / "box" / "customize.sh"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
DISK_GIB = 8
BOX_NAME = "nodeagent/bookworm"
# Images inside the VM: the names the provisioned containerd config and the test manifests use.
PAUSE_IMAGE = f"nodeagent.local/pause:{PAUSE_IMAGE_TAG}"
BUSYBOX_IMAGE = f"nodeagent.local/busybox:{BUSYBOX_IMAGE_TAG}"
PACKAGES = (
    "linux-image-amd64",
    "systemd-sysv",
    "udev",
    "dbus",
    "openssh-server",
    "sudo",
    "ifupdown",
    "isc-dhcp-client",
    "iproute2",
    "iptables",
    "grub-pc",
    "initramfs-tools",
    "rsync",
    "python3",
    "python3-venv",
    "runc",
    "containernetworking-plugins",
    "ca-certificates",
    "procps",
)
# containerd 1.7 from trixie (bookworm's 1.6 lacks GetContainerEvents); installed from a .deb fetched on the host.
CONTAINERD = "containerd/trixie"
# The kernel command line: the rootfs by label, a serial console, eth0 and the unified cgroup v2 hierarchy (bookworm's
# default, said out loud): the VM is the project's modern host, systemd as PID 1 on cgroup v2, where the testbed is v1.
KERNEL_ARGS = "root=LABEL=rootfs ro console=ttyS0,115200 net.ifnames=0 biosdevname=0 systemd.unified_cgroup_hierarchy=1"


class BoxError(VMError):
    """The box cannot be built: a tool is missing or a step failed (its output is attached)."""


@dataclass(frozen=True)
class Box:
    directory: Path

    @property
    def archive(self) -> Path:
        return self.directory / "nodeagent.box"

    @property
    def timings(self) -> dict[str, float]:
        path = self.directory / "timings.json"
        data = json.loads(path.read_text()) if path.exists() else {}
        return {str(k): float(v) for k, v in data.items()}


def vm_cache() -> Path:
    return cache_root() / "vm"


def python_dependencies(pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    data = tomllib.loads(pyproject.read_text())
    return [str(d) for d in data["project"]["dependencies"]]


BOX_VAGRANTFILE = """# The nodeagent box's own defaults (vagrant/Vagrantfile sets the rest).
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |libvirt|
    libvirt.disk_bus = "virtio"
  end
end
"""


# Bumped whenever the build steps change in a way the constants below do not show.
RECIPE_VERSION = 1


def recipe_hash() -> str:
    """Changes whenever the recipe or an input does: the steps' version, packages, kernel arguments, images, the
    customize script and nodeagent's dependencies."""
    recipe = {
        "version": RECIPE_VERSION,
        "suite": SUITE,
        "mirror": MIRROR,
        "disk": DISK_GIB,
        "packages": PACKAGES,
        "containerd": CONTAINERD,
        "kernel": KERNEL_ARGS,
        "images": [PAUSE_IMAGE, BUSYBOX_IMAGE],
        "customize": hashlib.sha256(CUSTOMIZE_SCRIPT.read_bytes()).hexdigest(),
        "dependencies": python_dependencies(),
        "box_vagrantfile": BOX_VAGRANTFILE,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def cached_box(cache: Path | None = None) -> Box | None:
    directory = (cache or vm_cache()) / f"box-{recipe_hash()}"
    box = Box(directory)
    return box if box.archive.is_file() else None


def _run(cmd: Sequence[str], *, step: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    log.info("box step=%s cmd=%s", step, " ".join(cmd))
    proc = subprocess.run(
        list(cmd),
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )
    if proc.returncode != 0:
        logs = vm_cache() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        full = logs / (step.replace(" ", "-") + ".log")
        full.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
        errors = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith(("E:", "dpkg: error"))]
        tail = "\n".join(errors[-20:]) or proc.stderr[-3000:]
        raise BoxError(f"{step}: {' '.join(cmd[:3])}... exited {proc.returncode} (full output: {full}):\n{tail}")
    return proc.stdout


REQUIRED_TOOLS = {
    "mmdebstrap": "mmdebstrap",
    "qemu-img": "qemu-utils",
    "sfdisk": "fdisk",
    "partx": "util-linux",
    "losetup": "mount",
    "mkfs.ext4": "e2fsprogs",
    "apt-get": "apt",
}


def missing_tools(which: dict[str, str | None]) -> list[str]:
    """The Debian packages to install for the tools `which` did not find (tool -> path or None)."""
    return sorted({REQUIRED_TOOLS[t] for t, path in which.items() if path is None and t in REQUIRED_TOOLS})


def ensure_tools() -> None:
    missing = missing_tools({tool: shutil.which(tool) for tool in REQUIRED_TOOLS})
    if missing:
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        _run(["apt-get", "install", "-y", "--no-install-recommends", *missing], step="apt-get install", env=env)


def build_box(cache: Path | None = None, *, force: bool = False) -> Box:
    """The cached box for this recipe, built first when missing (or when `force`)."""
    cache = cache or vm_cache()
    found = cached_box(cache)
    if found is not None and not force:
        log.info("box cached dir=%s", found.directory)
        return found
    if os.geteuid() != 0:
        raise BoxError("building the box needs root (loop devices, mounts, chroot)")
    ensure_tools()
    cache.mkdir(parents=True, exist_ok=True)
    final = cache / f"box-{recipe_hash()}"
    with (cache / ".build.lock").open("w") as lock:
        # One build at a time; a partial directory left by a build that was killed is never reused, only removed.
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = cached_box(cache)
        if found is not None and not force:
            return found
        for stale in stale_partials(cache):
            log.info("box removing partial build dir=%s", stale)
            shutil.rmtree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=f".box-{recipe_hash()}.partial-", dir=cache))
        try:
            timings = _build_into(work)
            (work / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")
            if final.exists():
                shutil.rmtree(final)
            work.rename(final)
        finally:
            if work.exists():
                shutil.rmtree(work, ignore_errors=True)
    log.info("box built dir=%s timings=%s", final, timings)
    return Box(final)


def stale_partials(cache: Path) -> list[Path]:
    """Directories of builds that did not finish (killed mid-way): never a box, only removed."""
    return sorted(p for p in cache.glob(".box-*.partial-*") if p.is_dir())


def _build_into(work: Path) -> dict[str, float]:
    timings: dict[str, float] = {}
    start = time.monotonic()
    payload = work / "payload"
    _stage_payload(payload)
    timings["payload"] = time.monotonic() - start
    t = time.monotonic()
    rootfs_tar = work / "rootfs.tar"
    containerd_deb = next(payload.glob("debs/containerd_*.deb"))
    _run(
        [
            "mmdebstrap",
            "--variant=minbase",
            "--include=" + ",".join(PACKAGES),
            # A local .deb is not visible inside mmdebstrap's chroot: upload it, then let apt resolve its depends.
            f"--customize-hook=upload {containerd_deb} /tmp/containerd.deb",
            '--customize-hook=chroot "$1" env DEBIAN_FRONTEND=noninteractive apt-get install -y '
            "--no-install-recommends /tmp/containerd.deb",
            '--customize-hook=rm -f "$1/tmp/containerd.deb"',
            SUITE,
            str(rootfs_tar),
            f"deb {MIRROR} {SUITE} main",
        ],
        step="mmdebstrap",
        env={"DEBIAN_FRONTEND": "noninteractive"},
    )
    timings["mmdebstrap"] = time.monotonic() - t
    t = time.monotonic()
    raw = work / "disk.raw"
    with raw.open("wb") as f:
        f.truncate(DISK_GIB << 30)
    _partition(raw)
    with _loop(raw) as (device, partition), _mounted(partition, work / "mnt") as mnt:
        _run(["tar", "-xpf", str(rootfs_tar), "-C", str(mnt), "--numeric-owner"], step="extract rootfs")
        shutil.copytree(payload, mnt / "tmp" / "payload")
        shutil.copy2(CUSTOMIZE_SCRIPT, mnt / "tmp" / "customize.sh")
        with _chroot_mounts(mnt):
            _run(["chroot", str(mnt), "/bin/sh", "/tmp/customize.sh", "/tmp/payload"], step="customize")
            _run(
                ["chroot", str(mnt), "grub-install", "--target=i386-pc", "--modules=part_msdos ext2", device],
                step="grub-install",
            )
        (mnt / "boot" / "grub" / "grub.cfg").write_text(grub_cfg(_kernel_files(mnt)))
        shutil.rmtree(mnt / "tmp" / "payload")
        (mnt / "tmp" / "customize.sh").unlink()
    (work / "mnt").rmdir()
    timings["disk"] = time.monotonic() - t
    t = time.monotonic()
    box_dir = work / "box"
    box_dir.mkdir()
    _run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(box_dir / "box.img")], step="qemu-img convert")
    raw.unlink()
    rootfs_tar.unlink()
    (box_dir / "metadata.json").write_text(
        json.dumps({"provider": "libvirt", "format": "qcow2", "virtual_size": DISK_GIB}) + "\n"
    )
    (box_dir / "Vagrantfile").write_text(BOX_VAGRANTFILE)
    with tarfile.open(work / "nodeagent.box", "w") as tar:
        for name in ("metadata.json", "Vagrantfile", "box.img"):
            tar.add(box_dir / name, arcname=name)
    shutil.rmtree(box_dir)
    shutil.rmtree(payload)
    timings["package"] = time.monotonic() - t
    timings["total"] = time.monotonic() - start
    return timings


def grub_cfg(kernel: tuple[str, str]) -> str:
    vmlinuz, initrd = kernel
    return (
        "set timeout=0\n"
        "set default=0\n"
        "insmod part_msdos\ninsmod ext2\n"
        "set root=(hd0,msdos1)\n"
        "menuentry 'Debian (nodeagent box)' {\n"
        f"  linux /boot/{vmlinuz} {KERNEL_ARGS}\n"
        f"  initrd /boot/{initrd}\n"
        "}\n"
    )


def _kernel_files(root: Path) -> tuple[str, str]:
    kernels = sorted(p.name for p in (root / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise BoxError("no kernel in /boot of the box's rootfs")
    version = kernels[-1].removeprefix("vmlinuz-")
    initrd = root / "boot" / f"initrd.img-{version}"
    if not initrd.exists():
        raise BoxError(f"no initramfs for kernel {version} in the box's rootfs")
    return kernels[-1], initrd.name


def _stage_payload(payload: Path) -> None:
    """What customize.sh installs: containerd's .deb, the wheels, the images, crictl, Vagrant's insecure key."""
    debs = payload / "debs"
    debs.mkdir(parents=True)
    _run(["apt-get", "download", CONTAINERD], step="apt-get download containerd", cwd=debs)
    wheels = payload / "wheels"
    _run(
        ["python3", "-m", "pip", "wheel", "--wheel-dir", str(wheels), "pip", *python_dependencies()],
        step="pip wheel",
    )
    images = payload / "images"
    images.mkdir()
    _stage_images(images)
    crictl = crictl_path()
    if crictl.exists():
        shutil.copy2(crictl, payload / "crictl")
    key = _vagrant_public_key()
    shutil.copy2(key, payload / "vagrant.pub")


def _stage_images(dest: Path) -> None:
    layouts = cache_root() / "images"
    pause = build_pause_image(layouts / "pause")
    busybox = build_busybox_image(layouts / "busybox")
    write_oci_archive(pause, dest / "pause.tar", name=PAUSE_IMAGE)
    write_oci_archive(busybox, dest / "busybox.tar", name=BUSYBOX_IMAGE)


def _vagrant_public_key() -> Path:
    candidates = sorted(Path("/usr/share/rubygems-integration/all/gems").glob("vagrant-*/keys/vagrant.pub"))
    candidates += sorted(Path("/opt/vagrant/embedded/gems").glob("gems/vagrant-*/keys/vagrant.pub"))
    if not candidates:
        raise BoxError("Vagrant's insecure public key (keys/vagrant.pub) not found: is vagrant installed?")
    return candidates[-1]


def _partition(raw: Path) -> None:
    proc = subprocess.run(
        ["sfdisk", "--quiet", str(raw)],
        input="label: dos\nstart=2048, type=83, bootable\n",
        text=True,
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        raise BoxError(f"sfdisk {raw}: {proc.stderr.strip()}")


@contextlib.contextmanager
def _loop(image: Path) -> Iterator[tuple[str, str]]:
    device = _run(["losetup", "--find", "--show", str(image)], step="losetup").strip()
    try:
        _run(["partx", "-a", device], step="partx -a")
        partition = f"{device}p1"
        for _ in range(50):
            if Path(partition).exists():
                break
            time.sleep(0.1)
        else:
            raise BoxError(f"no partition node {partition} after partx -a")
        try:
            yield device, partition
        finally:
            subprocess.run(["partx", "-d", device], capture_output=True, check=False)
    finally:
        subprocess.run(["losetup", "-d", device], capture_output=True, check=False)


@contextlib.contextmanager
def _mounted(partition: str, mnt: Path) -> Iterator[Path]:
    _run(["mkfs.ext4", "-q", "-L", "rootfs", partition], step="mkfs.ext4")
    mnt.mkdir(parents=True, exist_ok=True)
    _run(["mount", partition, str(mnt)], step="mount")
    try:
        yield mnt
    finally:
        _umount(mnt)


@contextlib.contextmanager
def _chroot_mounts(root: Path) -> Iterator[None]:
    mounted: list[Path] = []
    try:
        for source, target, args in (
            ("proc", "proc", ["-t", "proc"]),
            ("sysfs", "sys", ["-t", "sysfs"]),
            ("/dev", "dev", ["--bind"]),
        ):
            point = root / target
            _run(["mount", *args, source, str(point)], step=f"mount {target}")
            mounted.append(point)
        yield
    finally:
        for point in reversed(mounted):
            _umount(point)


def _umount(point: Path) -> None:
    if subprocess.run(["umount", str(point)], capture_output=True, check=False).returncode != 0:
        subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)
