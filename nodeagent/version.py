"""The two versions a node shows: the Kubernetes release nodeagent emulates, and nodeagent's own.

Tools read a Node's `status.nodeInfo.kubeletVersion` as the Kubernetes version the node implements: kubectl's version
skew warning, kubeadm's preflight and upgrade checks, the e2e framework, controllers that check a node's version
before they use a feature. So the node reports the emulated Kubernetes release there, as a kubelet of that release
would (`v1.34.4`), and probes say `kube-probe/1.34` as that kubelet's do. By default it is the release the testbed's
control plane is built from (`nodeagent.testbed.versions.KUBERNETES_VERSION`), so the two never drift apart; the
config's `emulatedKubernetesVersion` (a project extension) changes it.

nodeagent's own version shows where people look for it: `nodeagent --version`, the node's `Starting` event and the
node annotation `nodeagent.io/version` (a node may set its own annotations under NodeRestriction).
"""

from __future__ import annotations

import re
from typing import Final

from nodeagent import __version__
from nodeagent.testbed.versions import KUBERNETES_VERSION

NODEAGENT_VERSION: Final = __version__
DEFAULT_KUBERNETES_VERSION: Final = KUBERNETES_VERSION
# In the project's own domain: annotations under kubernetes.io are the project's to define, not ours.
VERSION_ANNOTATION: Final = "nodeagent.io/version"

# A Kubernetes release as `git describe` spells it for the kubelet's version.Info: v1.34.4, v1.35.0-alpha.1,
# v1.34.4+build.1 (semver 2.0 with the leading v).
_RELEASE = re.compile(
    r"v(?P<major>0|[1-9][0-9]*)\.(?P<minor>0|[1-9][0-9]*)\.(?P<patch>0|[1-9][0-9]*)"
    r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?"
)


def parse_kubernetes_version(text: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a release such as "v1.34.4"; ValueError for anything else."""
    match = _RELEASE.fullmatch(text)
    if match is None:
        raise ValueError(f'must be a Kubernetes release such as "v1.34.4", got "{text}"')
    return int(match["major"]), int(match["minor"]), int(match["patch"])


def probe_user_agent(kubernetes_version: str) -> str:
    """The probes' User-Agent, as upstream builds it from its own version: kube-probe/<major>.<minor>."""
    major, minor, _ = parse_kubernetes_version(kubernetes_version)
    return f"kube-probe/{major}.{minor}"


def version_text(kubernetes_version: str = DEFAULT_KUBERNETES_VERSION) -> str:
    """What `nodeagent --version` prints and the Starting event carries: both versions, ours first."""
    return f"nodeagent {NODEAGENT_VERSION} (Kubernetes {kubernetes_version})"
