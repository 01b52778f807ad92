"""kubeadm of KUBERNETES_VERSION, built from `k8s.io/kubernetes/cmd/kubeadm` as the other commands of the release are.

Built in a copy of the control plane's build module (as the upstream kubelet and agnhost are), stamped with the
release's version (kubeadm refuses a control plane newer than itself, and picks its default image tags from it), into
the versioned cache beside the control plane's binaries. Its presence there is the cache check.
"""

from __future__ import annotations

from pathlib import Path

from nodeagent.testbed.install import Progress, build_release_command
from nodeagent.testbed.versions import kubernetes_bin_dir

KUBEADM_PACKAGE = "k8s.io/kubernetes/cmd/kubeadm"


def kubeadm_path() -> Path:
    return kubernetes_bin_dir() / "kubeadm"


def build_kubeadm(progress: Progress) -> Path:
    """kubeadm into the versioned cache; a no-op when it is there."""
    return build_release_command(progress, "kubeadm", KUBEADM_PACKAGE, kubeadm_path())
