"""The testbed's pod network: the project's CNI plugin in a CNI bin dir of the testbed's own, and its helper.

`DIR/cni/bin` holds `nodeagent-bridge` (written by `cni.install`, pointing at this checkout and at the helper's
socket `DIR/cni/helper.sock`) and links to the reference `portmap` (chained after it in the conflist) and
`loopback` (containerd sets up each sandbox's `lo` with it). containerd's `bin_dir` is that directory, so no two
testbeds share a plugin, and the machine's /opt/cni/bin is never touched.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from cni.install import InstalledPlugin, install
from nodeagent.testbed.configs import REFERENCE_CNI_DIR
from nodeagent.testbed.layout import Layout

HELPER = "cni-helper"
REFERENCE_PLUGINS = ("portmap", "loopback")


class CNIInstallError(RuntimeError):
    """A reference plugin the testbed links to is missing."""


def install_plugins(layout: Layout, reference_dir: Path = Path(REFERENCE_CNI_DIR)) -> InstalledPlugin:
    bin_dir = layout.cni_bin_dir
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in REFERENCE_PLUGINS:
        target = reference_dir / name
        if not target.exists():
            raise CNIInstallError(
                f"{target} is missing: run `nodeagent testbed install` (Debian containernetworking-plugins)"
            )
        link = bin_dir / name
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(target, link)
    return install(bin_dir, helper_socket=layout.cni_helper_socket)


async def helper_ready(layout: Layout) -> bool:
    """The helper accepts connections on its socket."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(layout.cni_helper_socket))
    except OSError:
        return False
    finally:
        probe.close()
    return True
