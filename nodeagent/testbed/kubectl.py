"""kubectl, the testbed's build of it (versions.kubernetes_bin_dir), as the holder of a kubeconfig: one process a call.

The one place that runs it for its output, so that a cluster's admin (cluster.Cluster.kubectl) and a cluster given
only by its kubeconfig (the conformance harness) fail alike: the command and kubectl's own stderr.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from nodeagent.testbed.versions import kubernetes_bin_dir


class KubectlError(RuntimeError):
    """kubectl exited non-zero; the message is `kubectl ARGS: its stderr`."""


async def kubectl(kubeconfig: Path, *args: str) -> str:
    """`kubectl --kubeconfig=KUBECONFIG ARGS...`: its standard output, or KubectlError."""
    proc = await asyncio.create_subprocess_exec(
        str(kubernetes_bin_dir() / "kubectl"),
        f"--kubeconfig={kubeconfig}",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise KubectlError(f"kubectl {' '.join(args)}: {err.decode(errors='replace').strip()}")
    return out.decode()
