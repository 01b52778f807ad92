"""The images a kubeadm control plane runs, built here from the binaries the testbed already has.

These machines reach no image registry, so `kubeadm init` is pointed (`imageRepository` in its
ClusterConfiguration) at a local registry holding these images under kubeadm's names and tags:

- kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy: the release's static binaries at
  /usr/local/bin, where upstream's images have them (kubeadm's manifests name the command, not a path: PATH finds it);
- kube-proxy also carries the host's iptables (xtables multi binary, its applet links and its libraries): kube-proxy
  runs iptables-restore and iptables-save, which upstream's distroless-iptables base provides;
- etcd: Debian's etcd (dynamically linked) with its libraries, at /usr/local/bin/etcd as upstream's, under the
  Debian version as its tag (ETCD_IMAGE_TAG, set in the ClusterConfiguration);
- pause: the testbed's pause image under kubeadm's default pause tag.

CoreDNS is a Go module build of its own (testbed/coredns.py), made and pushed by `cluster up` only when the cluster
runs the addons (kube-proxy and CoreDNS, docs/kubeadm.md).

As the testbed's images, builds are deterministic (images.py), so a cached layout is reused when its inputs match.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from nodeagent.testbed import images
from nodeagent.testbed.images import DEFAULT_PATH, ImageBuildError, OCIImage, TarEntry
from nodeagent.testbed.versions import KUBERNETES_VERSION, cache_root, kubernetes_bin_dir

# The commands kubeadm runs from images of KUBERNETES_VERSION (kube-proxy through its DaemonSet).
KUBERNETES_IMAGES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
ETCD_BINARY = Path("/usr/bin/etcd")
PAUSE_IMAGE = "pause"
# kubeadm v1.34's default pause tag (constants.PauseVersion): what it expects the CRI's sandbox image to be.
PAUSE_TAG = "3.10.1"
ETCD_IMAGE = "etcd"
XTABLES = Path("/usr/sbin/xtables-nft-multi")
# iptables' match and target extensions (libxt_conntrack.so, libxt_comment.so, ...), dlopened from this directory
# (its compiled-in XTABLES_LIBDIR), so ldd of the multi binary does not list them: without them kube-proxy's first
# rule (`-m conntrack`) fails with "Couldn't load match `conntrack'" and it never syncs.
XTABLES_LIBDIR_GLOB = "usr/lib/*/xtables"
# What kube-proxy execs in iptables mode (and ip6tables for its dual-stack probe): each a link to the multi binary.
IPTABLES_APPLETS = (
    "iptables",
    "iptables-save",
    "iptables-restore",
    "ip6tables",
    "ip6tables-save",
    "ip6tables-restore",
)


@dataclass(frozen=True)
class ControlPlaneImage:
    repository: str
    tag: str
    image: OCIImage


def etcd_image_tag(version_output: str) -> str:
    """`etcd --version`'s "etcd Version: 3.5.16" -> "3.5.16-0", the shape of upstream's etcd tags."""
    match = re.search(r"etcd Version:\s*(\d+\.\d+\.\d+)", version_output)
    if match is None:
        raise ImageBuildError(f"cannot read the etcd version from {version_output!r}")
    return f"{match.group(1)}-0"


def installed_etcd_tag(binary: Path = ETCD_BINARY) -> str:
    if not binary.is_file():
        raise ImageBuildError(f"{binary} is missing: `nodeagent testbed install` installs Debian's etcd-server")
    proc = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=False)
    return etcd_image_tag(proc.stdout)


def kubernetes_binary_files(name: str, data: bytes) -> list[TarEntry]:
    """One static binary of the release at /usr/local/bin, as upstream's images have it."""
    return [TarEntry.file(f"usr/local/bin/{name}", data, mode=0o755), TarEntry.directory("tmp", mode=0o1777)]


def iptables_files(xtables_path: str, host_files: Mapping[str, Path]) -> list[TarEntry]:
    """The multi binary and its libraries (from `host_program_files`) plus one link per applet in usr/sbin."""
    entries = [TarEntry.file(path, source.read_bytes(), mode=0o755) for path, source in sorted(host_files.items())]
    name = Path(xtables_path).name
    entries += [TarEntry.symlink(f"usr/sbin/{applet}", name) for applet in IPTABLES_APPLETS]
    # iptables takes its lock here (xtables.lock); the run dir must exist in the image.
    entries.append(TarEntry.directory("run"))
    return entries


def xtables_extensions(root: Path = Path("/")) -> dict[str, Path]:
    """Image path -> host file of every iptables extension on the host (`XTABLES_LIBDIR_GLOB`)."""
    found = {
        module.relative_to(root).as_posix(): module
        for libdir in sorted(root.glob(XTABLES_LIBDIR_GLOB))
        for module in sorted(libdir.glob("*.so"))
    }
    if not found:
        raise ImageBuildError(f"no iptables extensions under /{XTABLES_LIBDIR_GLOB}: apt-get install iptables")
    return found


def _binary_config(name: str) -> dict[str, object]:
    return {"Entrypoint": [f"/usr/local/bin/{name}"], "Env": [DEFAULT_PATH], "WorkingDir": "/"}


def build_kubernetes_image(dest: Path, name: str, binary: Path) -> OCIImage:
    if not binary.is_file():
        raise ImageBuildError(f"{binary} is missing: `nodeagent testbed install` builds {name}")
    data = binary.read_bytes()
    host_files = (
        images.host_program_files({XTABLES.as_posix().lstrip("/"): XTABLES, **xtables_extensions()})
        if name == "kube-proxy"
        else {}
    )
    inputs = {
        "image": f"kubeadm-{name}",
        "binary": images.sha256_digest(data),
        "host": {path: images.sha256_digest(source.read_bytes()) for path, source in sorted(host_files.items())},
        "architecture": images.host_architecture(),
    }

    def files() -> list[TarEntry]:
        entries = kubernetes_binary_files(name, data)
        if host_files:
            entries += iptables_files(XTABLES.as_posix(), host_files)
        return images.with_parent_directories(entries)

    return images._build(dest, inputs, files, _binary_config(name))


def build_etcd_image(dest: Path, binary: Path = ETCD_BINARY) -> OCIImage:
    host_files = images.host_program_files({"usr/local/bin/etcd": binary})
    inputs = {
        "image": "kubeadm-etcd",
        "host": {path: images.sha256_digest(source.read_bytes()) for path, source in sorted(host_files.items())},
        "architecture": images.host_architecture(),
    }

    def files() -> list[TarEntry]:
        entries = [TarEntry.file(path, source.read_bytes(), mode=0o755) for path, source in host_files.items()]
        # etcd's data dir is a hostPath under /var/lib/etcd; /tmp for anything it writes besides.
        entries.append(TarEntry.directory("tmp", mode=0o1777))
        return images.with_parent_directories(entries)

    return images._build(dest, inputs, files, _binary_config("etcd"))


def default_cache() -> Path:
    """Where the kubeadm images' layouts are kept (the machine's image cache)."""
    return cache_root() / "images" / "kubeadm"


def build_control_plane_images(cache: Path | None = None) -> list[ControlPlaneImage]:
    """Every image kubeadm pulls (but CoreDNS), built into `cache` (default: the machine's image cache)."""
    cache = cache or default_cache()
    bin_dir = kubernetes_bin_dir()
    built = [
        ControlPlaneImage(name, KUBERNETES_VERSION, build_kubernetes_image(cache / name, name, bin_dir / name))
        for name in KUBERNETES_IMAGES
    ]
    built.append(ControlPlaneImage(ETCD_IMAGE, installed_etcd_tag(), build_etcd_image(cache / ETCD_IMAGE)))
    built.append(ControlPlaneImage(PAUSE_IMAGE, PAUSE_TAG, images.build_pause_image(cache / PAUSE_IMAGE)))
    return built
