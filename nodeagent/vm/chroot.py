"""A small Debian rootfs in which tests run vagrant/provision.sh as root, without booting a VM.

It has what provisioning touches (python3-venv, systemd's systemctl, containerd's unit) and nothing slow. Cached
as a tar under /var/cache/nodeagent/vm/, keyed by its package list, written to a temp name and renamed when complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from nodeagent.vm.box import MIRROR, SUITE, BoxError, vm_cache

PACKAGES = ("python3", "python3-venv", "systemd", "containerd")


def rootfs_tar(cache: Path | None = None) -> Path:
    cache = cache or vm_cache()
    key = hashlib.sha256(json.dumps([SUITE, MIRROR, PACKAGES]).encode()).hexdigest()[:16]
    tar = cache / f"provision-rootfs-{key}.tar"
    if tar.is_file():
        return tar
    cache.mkdir(parents=True, exist_ok=True)
    # Ends in .tar: mmdebstrap picks its output format from the name.
    partial = cache / f".{tar.stem}.partial-{os.getpid()}.tar"
    try:
        proc = subprocess.run(
            [
                "mmdebstrap",
                "--variant=minbase",
                "--include=" + ",".join(PACKAGES),
                SUITE,
                str(partial),
                f"deb {MIRROR} {SUITE} main",
            ],
            capture_output=True,
            text=True,
            check=False,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        if proc.returncode != 0:
            raise BoxError(f"mmdebstrap (provisioning rootfs) exited {proc.returncode}: {proc.stderr[-2000:]}")
        partial.rename(tar)
    finally:
        partial.unlink(missing_ok=True)
    return tar
