"""The node image's staged files and its cache key (nodeimage.py)."""

from __future__ import annotations

import itertools
import tarfile
from pathlib import Path

from nodeagent.kind import nodeimage


def test_small_files_have_the_version_and_executable_scripts() -> None:
    files = nodeimage.small_files(version="v1.34.4")
    assert files["kind/version"] == (b"v1.34.4\n", 0o644)
    assert files["usr/local/bin/entrypoint"][1] == 0o755
    assert files["usr/local/bin/kubelet-cgroup-root"][1] == 0o755
    assert b"SystemdCgroup = true" in files["etc/containerd/config.toml"][0]
    assert b"SystemdCgroup = false" in nodeimage.small_files(systemd_cgroup=False)["etc/containerd/config.toml"][0]


def test_files_tar_is_root_owned_with_binaries_and_links(tmp_path: Path) -> None:
    binary = tmp_path / "kubeadm"
    binary.write_bytes(b"\x7fELF fake")
    tar_path = nodeimage.files_tar(
        tmp_path / "files.tar",
        {"kind/version": (b"v1\n", 0o644), "usr/local/bin/x": (b"#!/bin/sh\n", 0o755)},
        {"kubeadm": binary},
    )
    with tarfile.open(tar_path) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert tar.extractfile("usr/bin/kubeadm").read() == b"\x7fELF fake"  # type: ignore[union-attr]
    assert members["usr/bin/kubeadm"].mode == 0o755
    assert members["usr/local/bin/x"].mode == 0o755
    assert members["kind"].isdir() and members["usr/local/bin"].isdir()
    assert members["opt/cni/bin"].issym() and members["opt/cni/bin"].linkname == "/usr/lib/cni"
    wants = members["etc/systemd/system/multi-user.target.wants/kubelet.service"]
    assert wants.issym() and wants.linkname == "/etc/systemd/system/kubelet.service"
    getty = members["etc/systemd/system/getty@tty1.service"]
    assert getty.issym() and getty.linkname == "/dev/null"
    assert all(m.uid == 0 and m.gid == 0 and m.mtime == 0 for m in members.values())


def test_inputs_digest_changes_with_each_input() -> None:
    small = {"a": (b"1", 0o644)}
    base = nodeimage.inputs_digest("recipe", small, {"kubelet": "sha256:1"}, {"registry.k8s.io/pause:3.10.1": "d"})
    assert base == nodeimage.inputs_digest(
        "recipe", small, {"kubelet": "sha256:1"}, {"registry.k8s.io/pause:3.10.1": "d"}
    )
    variants = [
        nodeimage.inputs_digest("other", small, {"kubelet": "sha256:1"}, {"registry.k8s.io/pause:3.10.1": "d"}),
        nodeimage.inputs_digest(
            "recipe", {"a": (b"2", 0o644)}, {"kubelet": "sha256:1"}, {"registry.k8s.io/pause:3.10.1": "d"}
        ),
        nodeimage.inputs_digest(
            "recipe", {"a": (b"1", 0o755)}, {"kubelet": "sha256:1"}, {"registry.k8s.io/pause:3.10.1": "d"}
        ),
        nodeimage.inputs_digest("recipe", small, {"kubelet": "sha256:2"}, {"registry.k8s.io/pause:3.10.1": "d"}),
        nodeimage.inputs_digest("recipe", small, {"kubelet": "sha256:1"}, {"registry.k8s.io/pause:3.10": "d"}),
        nodeimage.inputs_digest("recipe", small, {"kubelet": "sha256:1"}, {"registry.k8s.io/pause:3.10.1": "e"}),
    ]
    assert len({base, *variants}) == 7


def test_image_name_and_archive_carry_the_digest(tmp_path: Path) -> None:
    digest = "ab" * 32
    assert nodeimage.image_name(digest, "v1.34.4") == "nodeagent/kind-node:v1.34.4-abababababab"
    assert nodeimage.archive_path(digest, tmp_path) == tmp_path / "kind" / "node-image-abababababababab.tar"


def test_node_packages_have_what_kind_nodes_run() -> None:
    for package in ("systemd", "containerd", "runc", "iptables", "conntrack", "containernetworking-plugins"):
        assert package in nodeimage.NODE_PACKAGES
    assert nodeimage.ROOTFS_PREFIX != "check-rootfs"


def test_build_container_runs_containerd_with_systemds_stop_signal() -> None:
    args = nodeimage.build_run_args("base:1")
    pairs = list(itertools.pairwise(args))
    assert ("--stop-signal", "SIGRTMIN+3") in pairs
    assert ("--entrypoint", "/usr/bin/containerd") in pairs
    assert args[0] == "run" and args[-1] == "base:1"


def test_stale_archives_are_the_other_node_images(tmp_path: Path) -> None:
    current = tmp_path / "node-image-aaaa.tar"
    for name in ("node-image-aaaa.tar", "node-image-bbbb.tar", "node-rootfs-cccc.tar", "node-image-dddd.tar.partial"):
        (tmp_path / name).write_bytes(b"")
    assert nodeimage.stale_archives(current) == [tmp_path / "node-image-bbbb.tar"]
