"""Pinned versions of the real parts, and where their build cache lives (outside the repo, reused across runs)."""

from __future__ import annotations

import os
from pathlib import Path

KUBERNETES_VERSION = "v1.34.4"
# The cri-api staging module released with KUBERNETES_VERSION: the wire-compatibility oracle of cri/.
CRI_API_VERSION = "v0.34.4"
CRI_TOOLS_VERSION = "v1.34.0"


def cache_root() -> Path:
    return Path(os.environ.get("NODEAGENT_CACHE", "/var/cache/nodeagent"))


def kubernetes_bin_dir() -> Path:
    return cache_root() / f"kubernetes-{KUBERNETES_VERSION}" / "bin"


def crictl_path() -> Path:
    return cache_root() / f"kubernetes-{KUBERNETES_VERSION}" / f"crictl-{CRI_TOOLS_VERSION}" / "crictl"
