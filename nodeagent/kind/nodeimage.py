"""`nodeagent kind build-image`: a kind node image for Kubernetes v1.34.4, built offline (docs/kind.md).

1. A bookworm rootfs by mmdebstrap (nodecheck.build_rootfs, cached by its package list) with systemd, containerd
   and runc, iptables and the reference CNI plugins, from Debian.
2. `docker import` into the isolated daemon (dockerd.py) as the base image.
3. A build container of that base runs containerd alone; `docker cp` adds nodefiles.py's files, the cache's
   kubeadm/kubelet/kubectl and the project's control-plane images as OCI archives, which `ctr -n k8s.io images
   import --no-unpack` preloads under the names kubeadm expects (content only: the node unpacks them on its /var).
4. `docker commit` with the node's ENTRYPOINT, CMD, STOPSIGNAL and labels, then `docker save` into the cache as
   `kind/node-image-<inputs digest>.tar`: the next build with the same inputs only `docker load`s it.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nodeagent.kind import nodecheck, nodefiles
from nodeagent.kind.dockerd import IsolatedDocker
from nodeagent.kind.errors import KindError
from nodeagent.testbed import certifiedimages, controlplaneimages, coredns, images
from nodeagent.testbed.images import OCIImage
from nodeagent.testbed.versions import KUBERNETES_VERSION, cache_root, crictl_path, etcd_e2e_dir, kubernetes_bin_dir

log = logging.getLogger(__name__)

NODE_PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "iproute2",
    "procps",
    "containerd",
    "runc",
    "iptables",
    "conntrack",
    "ethtool",
    "socat",
    "kmod",
    "ebtables",
    "containernetworking-plugins",
    "ca-certificates",
)
ROOTFS_PREFIX = "node-rootfs"
KUBE_BINARIES = ("kubeadm", "kubelet", "kubectl")
REPOSITORY = "nodeagent/kind-node"
BUILD_CONTAINER = "nodeagent-kind-node-build"


@dataclass
class BuildResult:
    image: str
    archive: Path
    cached: bool
    timings: dict[str, float] = field(default_factory=dict)
    preloaded: list[str] = field(default_factory=list)


# Units masked in the image (a link to /dev/null), as kind's base image keeps them from running: a privileged node
# container sees the host's /dev/tty*, so a getty on tty1 would either fail (the node "degraded", seen once under
# load) or sit on the host's console.
MASKED_UNITS = ("getty.target", "getty@tty1.service", "console-getty.service", "serial-getty@.service")


def _mode(path: str) -> int:
    return 0o755 if path.startswith("usr/local/bin/") else 0o644


def small_files(systemd_cgroup: bool = True, version: str = KUBERNETES_VERSION) -> dict[str, tuple[bytes, int]]:
    """Image path (relative) -> (content, mode) of every file nodefiles.py writes."""
    texts = {
        "etc/containerd/config.toml": nodefiles.containerd_config(systemd_cgroup=systemd_cgroup),
        "etc/systemd/system/kubelet.service": nodefiles.kubelet_service(),
        "etc/systemd/system/kubelet.service.d/10-kubeadm.conf": nodefiles.kubeadm_dropin(),
        "etc/systemd/system/kubelet.slice": nodefiles.kubelet_slice(),
        "etc/default/kubelet": "KUBELET_EXTRA_ARGS=\n",
        nodefiles.KUBELET_CGROUP_ROOT_SCRIPT.lstrip("/"): nodefiles.kubelet_cgroup_root_script(),
        nodefiles.ENTRYPOINT.lstrip("/"): nodefiles.entrypoint_script(),
        "kind/version": version + "\n",
        "etc/crictl.yaml": f"runtime-endpoint: unix://{nodefiles.CONTAINERD_SOCKET}\n",
    }
    return {path: (text.encode(), _mode(path)) for path, text in texts.items()}


def files_tar(dest: Path, small: Mapping[str, tuple[bytes, int]], binaries: Mapping[str, Path]) -> Path:
    """The tar `docker cp -` extracts at the build container's root: the small files, the kube binaries (under
    /usr/bin), the masked units, the link that makes kubelet start on boot, and /opt/cni/bin as a link to Debian's
    plugins."""
    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:

        def add(info: tarfile.TarInfo, data: bytes | None = None, source: Path | None = None) -> None:
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 0
            if source is not None:
                info.size = source.stat().st_size
                with source.open("rb") as fh:
                    tar.addfile(info, fh)
            elif data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)

        directories = sorted(
            {str(Path(p).parents[i]) for p in [*small, "opt/cni/bin"] for i in range(len(Path(p).parts) - 1)}
        )
        for directory in directories:
            info = tarfile.TarInfo(directory)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            add(info)
        for path, (data, mode) in sorted(small.items()):
            info = tarfile.TarInfo(path)
            info.mode = mode
            add(info, data=data)
        for name, source in sorted(binaries.items()):
            info = tarfile.TarInfo(nodefiles.KUBE_BIN_DIR.lstrip("/") + "/" + name)
            info.mode = 0o755
            add(info, source=source)
        for unit in MASKED_UNITS:
            masked = tarfile.TarInfo(f"etc/systemd/system/{unit}")
            masked.type = tarfile.SYMTYPE
            masked.linkname = "/dev/null"
            add(masked)
        wants = tarfile.TarInfo("etc/systemd/system/multi-user.target.wants/kubelet.service")
        wants.type = tarfile.SYMTYPE
        wants.linkname = "/etc/systemd/system/kubelet.service"
        add(wants)
        cni = tarfile.TarInfo(nodefiles.CNI_BIN_DIR.lstrip("/"))
        cni.type = tarfile.SYMTYPE
        cni.linkname = nodefiles.DEBIAN_CNI_DIR
        add(cni)
    return dest


def control_plane_images() -> dict[str, OCIImage]:
    """The project's control-plane images (controlplaneimages.py) and CoreDNS (coredns.py), by local name; etcd is
    the certified suite's static etcd v3.6.4 (certifiedimages.py), not the testbed's Debian 3.5: kubeadm v1.34
    gives an etcd it takes for 3.6 (its default tag, 3.6.5-0) `--feature-gates=InitialCorruptCheck=true`, which
    3.5 refuses ("flag provided but not defined: -feature-gates")."""
    built = {image.repository: image.image for image in controlplaneimages.build_control_plane_images()}
    built[nodefiles.ETCD_IMAGE] = certifiedimages.build_etcd_image(
        cache_root() / "images" / "certified" / "etcd", etcd_e2e_dir()
    )
    binary = coredns.coredns_path()
    built[coredns.COREDNS_IMAGE] = coredns.build_coredns_image(
        controlplaneimages.default_cache() / coredns.COREDNS_IMAGE, binary
    )
    return built


def build_run_args(base: str) -> list[str]:
    """The build container: containerd alone (to import the images), with the node's stop signal, which `docker
    commit` keeps in the image's config."""
    return [
        "run",
        "--detach",
        "--name",
        BUILD_CONTAINER,
        "--stop-signal",
        nodefiles.STOP_SIGNAL,
        "--entrypoint",
        "/usr/bin/containerd",
        base,
    ]


def inputs_digest(
    rootfs_recipe: str, small: Mapping[str, tuple[bytes, int]], binaries: Mapping[str, str], preload: Mapping[str, str]
) -> str:
    """The cache key: the rootfs recipe, each small file, each binary's digest, and each preloaded image's name and
    manifest digest."""
    doc = {
        "rootfs": rootfs_recipe,
        "files": {path: [hashlib.sha256(data).hexdigest(), mode] for path, (data, mode) in sorted(small.items())},
        "binaries": dict(sorted(binaries.items())),
        "preload": dict(sorted(preload.items())),
        "format": 2,  # 2: the getty units masked
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def image_name(digest: str, version: str = KUBERNETES_VERSION) -> str:
    return f"{REPOSITORY}:{version}-{digest[:12]}"


def archive_path(digest: str, cache: Path | None = None) -> Path:
    return (cache or cache_root()) / "kind" / f"node-image-{digest[:16]}.tar"


def stale_archives(current: Path) -> list[Path]:
    """The other node image archives beside `current` (older inputs; each is about 700 MiB)."""
    return sorted(p for p in current.parent.glob("node-image-*.tar") if p != current)


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def build_node_image(docker: IsolatedDocker, progress: Callable[[str], None], cache: Path | None = None) -> BuildResult:
    """The node image in `docker`, loaded from the cache or built (then saved to the cache)."""
    timings: dict[str, float] = {}
    t = time.monotonic()
    small = small_files()
    bin_dir = kubernetes_bin_dir()
    binaries = {name: bin_dir / name for name in KUBE_BINARIES}
    # Debian bookworm has no cri-tools: the testbed's crictl, for looking into a node.
    binaries["crictl"] = crictl_path()
    for name, path in binaries.items():
        if not path.is_file():
            raise KindError(f"{path} missing: `nodeagent testbed install` builds {name}")
    oci = control_plane_images()
    names = nodefiles.upstream_image_names()
    preload = {n.upstream: oci[n.local].manifest_digest for n in names}
    digest = inputs_digest(
        nodecheck.rootfs_recipe(NODE_PACKAGES),
        small,
        {name: _file_digest(path) for name, path in binaries.items()},
        preload,
    )
    timings["inputs"] = time.monotonic() - t
    name = image_name(digest)
    archive = archive_path(digest, cache)
    if archive.exists():
        t = time.monotonic()
        docker.docker("load", "-i", str(archive), timeout=900)
        timings["docker load"] = time.monotonic() - t
        progress(f"node image {name}: loaded from {archive}")
        return BuildResult(name, archive, cached=True, timings=timings, preloaded=sorted(preload))
    t = time.monotonic()
    rootfs, seconds = nodecheck.build_rootfs(cache, NODE_PACKAGES, ROOTFS_PREFIX)
    timings["rootfs (mmdebstrap, 0 = cached)"] = seconds
    timings["rootfs total"] = time.monotonic() - t
    progress(f"rootfs {rootfs} ({rootfs.stat().st_size >> 20} MiB)")
    base = f"{REPOSITORY}-base:{digest[:12]}"
    work = Path(tempfile.mkdtemp(prefix="nodeagent-kind-image-"))
    try:
        t = time.monotonic()
        docker.docker("import", "--change", "ENV container=docker", str(rootfs), base, timeout=600)
        timings["docker import"] = time.monotonic() - t
        t = time.monotonic()
        archives = work / "images"
        for n in names:
            images.write_oci_archive(oci[n.local], archives / f"{n.local}.tar", name=n.upstream)
        files = files_tar(work / "files.tar", small, binaries)
        timings["stage files"] = time.monotonic() - t
        docker.docker("rm", "--force", BUILD_CONTAINER, check=False)
        docker.docker(*build_run_args(base))
        try:
            t = time.monotonic()
            _docker_cp_tar(docker, files, BUILD_CONTAINER)
            docker.docker("exec", BUILD_CONTAINER, "mkdir", "-p", "/kind/images")
            docker.docker("cp", str(archives) + "/.", f"{BUILD_CONTAINER}:/kind/images", timeout=600)
            timings["docker cp"] = time.monotonic() - t
            t = time.monotonic()
            _wait_ctr(docker)
            for n in names:
                docker.docker(
                    "exec",
                    BUILD_CONTAINER,
                    "ctr",
                    "--namespace",
                    "k8s.io",
                    "images",
                    "import",
                    "--no-unpack",
                    f"/kind/images/{n.local}.tar",
                    timeout=600,
                )
            listed = docker.docker("exec", BUILD_CONTAINER, "ctr", "--namespace", "k8s.io", "images", "ls", "-q")
            missing = sorted(set(preload) - set(listed.stdout.split()))
            if missing:
                raise KindError(f"images missing after ctr import: {missing}")
            docker.docker("exec", BUILD_CONTAINER, "rm", "-rf", "/kind/images")
            timings["ctr import"] = time.monotonic() - t
            # containerd ends on SIGTERM (the container's stop signal is systemd's, which it ignores).
            docker.docker("kill", "--signal", "SIGTERM", BUILD_CONTAINER)
            docker.docker("wait", BUILD_CONTAINER, timeout=60)
            t = time.monotonic()
            labels = nodefiles.image_labels(KUBERNETES_VERSION, digest)
            commit = ["commit"]
            for change in nodefiles.commit_changes(labels):
                commit += ["--change", change]
            docker.docker(*commit, BUILD_CONTAINER, name, timeout=600)
            timings["docker commit"] = time.monotonic() - t
        finally:
            docker.docker("rm", "--force", BUILD_CONTAINER, check=False)
            docker.docker("rmi", base, check=False)
        t = time.monotonic()
        archive.parent.mkdir(parents=True, exist_ok=True)
        partial = archive.with_name(archive.name + ".partial")
        docker.docker("save", "-o", str(partial), name, timeout=900)
        partial.rename(archive)
        timings["docker save"] = time.monotonic() - t
        for stale in stale_archives(archive):
            stale.unlink(missing_ok=True)
            log.info("removed stale node image archive=%s", stale)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    progress(f"node image {name}: built, saved to {archive} ({archive.stat().st_size >> 20} MiB)")
    return BuildResult(name, archive, cached=False, timings=timings, preloaded=sorted(preload))


def _docker_cp_tar(docker: IsolatedDocker, tar: Path, container: str) -> None:
    argv = [*docker.base_argv(), "cp", "-", f"{container}:/"]
    with tar.open("rb") as fh:
        proc = subprocess.run(argv, stdin=fh, capture_output=True, text=True, check=False, timeout=600)
    if proc.returncode != 0:
        raise KindError(f"docker cp - {container}:/ failed (exit {proc.returncode}): {proc.stderr.strip()}")


def _wait_ctr(docker: IsolatedDocker, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        proc = docker.docker("exec", BUILD_CONTAINER, "ctr", "version", check=False)
        if proc.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise KindError(f"containerd in the build container not answering: {proc.stderr.strip()}")
        time.sleep(0.5)
