"""Upstream's sample device plugin (`k8s.io/kubernetes/test/images/sample-device-plugin`) for the testbed: built
from the release's module as agnhost is, and run on the host beside an agent.

The plugin serves `example.com/resource` with two devices (Dev-1, Dev-2); its Allocate creates `/tmp/<device>` on
the host and answers with a mount of it at the same path in the container. Its registration socket is upstream's
constant `/var/lib/kubelet/device-plugins/kubelet.sock`, so `start` runs it in a mount namespace of its own in which
that directory is the agent's `<root-dir>/device-plugins` (bind-mounted over a private tmpfs on /var/lib/kubelet):
the host's /var/lib/kubelet is neither used nor changed, and the plugin's /tmp is the host's. The upstream kubelet
(nodeagent/testbed/upstreamkubelet.py) serves that constant path itself, whatever its --root-dir: `start_in` runs the
plugin there directly (tests/differential/devices.py).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from nodeagent.testbed.install import (
    Progress,
    build_in_release_module,
    control_plane_module,
    kubernetes_source,
)
from nodeagent.testbed.versions import KUBERNETES_VERSION, cache_root

SAMPLE_DEVICE_PLUGIN_PACKAGE = "k8s.io/kubernetes/test/images/sample-device-plugin"
SAMPLE_DEVICE_PLUGIN_VERSION = "1.8"  # test/images/sample-device-plugin/VERSION of the release
RESOURCE = "example.com/resource"
DEVICES = ("Dev-1", "Dev-2")
UPSTREAM_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"


def sample_device_plugin_path() -> Path:
    return (
        cache_root()
        / f"kubernetes-{KUBERNETES_VERSION}"
        / f"sample-device-plugin-{SAMPLE_DEVICE_PLUGIN_VERSION}"
        / "sample-device-plugin"
    )


def build_sample_device_plugin(progress: Progress) -> Path:
    """The plugin of KUBERNETES_VERSION, static, in a copy of the control plane's build module; cached."""
    binary = sample_device_plugin_path()
    if binary.exists():
        progress.step(f"sample-device-plugin {SAMPLE_DEVICE_PLUGIN_VERSION}: cached")
        return binary
    module = control_plane_module("sample-device-plugin")
    source = kubernetes_source()
    progress.step(f"sample-device-plugin {SAMPLE_DEVICE_PLUGIN_VERSION}: go build")
    took = build_in_release_module(
        source,
        module,
        binary,
        package=SAMPLE_DEVICE_PLUGIN_PACKAGE,
        work=binary.parent.with_name(binary.parent.name + ".build"),
    )
    progress.step(f"sample-device-plugin: built in {took:.0f}s")
    return binary


def start(binary: Path, root_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    """Runs the plugin for the agent of `root_dir` (nodeagent: `<root-dir>/device-plugins`); stop it with SIGTERM (it
    then removes its socket)."""
    return start_in(binary, root_dir / "device-plugins", log)


def start_in(binary: Path, plugin_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    """Runs the plugin against the registration socket in `plugin_dir`. UPSTREAM_PLUGIN_DIR itself is used as it is:
    the upstream kubelet's device manager listens there whatever its --root-dir (the constant
    `pluginapi.KubeletSocket`); any other directory through a mount namespace of the plugin's own."""
    plugin_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PLUGIN_SOCK_DIR": UPSTREAM_PLUGIN_DIR}
    if plugin_dir == Path(UPSTREAM_PLUGIN_DIR):
        argv = [str(binary), "--alsologtostderr"]
    else:
        script = (
            "set -e; mount --make-rprivate /; mount -t tmpfs tmpfs /var/lib/kubelet 2>/dev/null "
            "|| { mkdir -p /var/lib/kubelet && mount -t tmpfs tmpfs /var/lib/kubelet; }; "
            f'mkdir -p {UPSTREAM_PLUGIN_DIR}; mount --bind "$1" {UPSTREAM_PLUGIN_DIR}; shift; exec "$@"'
        )
        argv = ["unshare", "--mount", "sh", "-c", script, "sh", str(plugin_dir), str(binary), "--alsologtostderr"]
    with log.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
