"""The upstream kubelet as one testbed's node leaves the pod logs of every other testbed on the machine alone
(issue 34).

Every testbed's agent writes its pods' logs under /var/log/pods (the testbed leaves nodeagent's podLogsDir at its
default), and the upstream kubelet's container GC removes, every minute (ContainerGCPeriod), each directory in its
podLogsDir whose pod it does not know (evictPodLogsDirectories). With the default podLogsDir, a kubelet run by one
testbed (the differential corpus, benchmarks/versus, a test) deleted the log directories of the short pods another
testbed's agent was running, and their output was lost: a pod Succeeded with an empty `kubectl logs`.
testbed/upstreamkubelet.py now gives the kubelet a podLogsDir inside the testbed.

Here a log directory is planted in /var/log/pods as another testbed's agent leaves one, the kubelet runs a pod of its
own (whose log must land in its own podLogsDir) and then past its first GC passes, and the planted file must still be
there. With the kubelet on /var/log/pods it is gone within the first minute. Another testbed's kubelet started from
the old code would sweep it too: the failure message names every other kubelet that ran meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
import uuid
from pathlib import Path

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.processes import tail
from nodeagent.testbed.testbed import Testbed
from nodeagent.testbed.upstreamkubelet import DEFAULT_POD_LOGS_DIR, start_kubelet, stop_kubelet
from tests.integration.agentproc import NS, clean_up, one_container_pod

# Past the kubelet's first container GC passes: one at start (sources not ready yet), then every minute.
WATCH_SECONDS = 90.0


def other_kubelets(own_root: Path) -> set[str]:
    """The --config of every upstream kubelet running on this machine for another testbed."""
    found: set[str] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if argv and argv[0].endswith(b"/kubelet"):
                config = next((a.decode() for a in argv if a.startswith(b"--config=")), "")
                if not config.startswith(f"--config={own_root}/"):
                    found.add(config)
    return found


async def test_upstream_kubelet_keeps_to_its_own_pod_logs(
    testbed: Testbed, settings: Settings, admin: KubeClient
) -> None:
    await clean_up(testbed, settings)
    planted = DEFAULT_POD_LOGS_DIR / f"{NS}_other-testbed-pod_{uuid.uuid4()}" / "main" / "0.log"
    planted.parent.mkdir(parents=True)
    planted.write_text("2026-11-28T00:00:00.000000000Z stdout F a line of another testbed's pod\n")
    log = testbed.layout.logs / "kubelet-pod-logs.log"
    kubelet = await start_kubelet(testbed, log)
    started = time.monotonic()
    others = other_kubelets(testbed.layout.root)
    name = f"own-log-{uuid.uuid4().hex[:6]}"
    try:
        line = f"own line {name}"
        image = configs.busybox_image(settings)
        body = one_container_pod(
            name, {"image": image, "command": ["sh", "-c", f"echo {line}"]}, {"test": "pod-logs"}, restartPolicy="Never"
        )
        pod = await admin.create(paths.pods(NS), body)
        deadline = time.monotonic() + 60
        while (await admin.get(paths.pod(NS, name))).get("status", {}).get("phase") != "Succeeded":
            assert time.monotonic() < deadline, f"{name} not Succeeded\n--- {log} ---\n{tail(log, 40)}"
            await asyncio.sleep(0.25)
        # Its own pod's log is in its own podLogsDir, inside the testbed, not in the machine's /var/log/pods.
        assert kubelet.pod_logs_dir.is_relative_to(testbed.layout.root), kubelet.pod_logs_dir
        pod_dir = f"{NS}_{name}_{pod['metadata']['uid']}"
        own = kubelet.pod_logs_dir / pod_dir / "main" / "0.log"
        assert line in own.read_text(), own
        assert not (DEFAULT_POD_LOGS_DIR / pod_dir).exists()
        while time.monotonic() - started < WATCH_SECONDS:
            others |= other_kubelets(testbed.layout.root)
            assert planted.exists(), (
                f"{planted} removed {time.monotonic() - started:.0f}s after the kubelet started; other testbeds' "
                f"kubelets seen meanwhile: {sorted(others) or 'none'}\n--- {log} ---\n{tail(log, 20)}"
            )
            await asyncio.sleep(1.0)
    finally:
        await stop_kubelet(kubelet)
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, name), grace_period_seconds=0)
        shutil.rmtree(planted.parent.parent, ignore_errors=True)
        await clean_up(testbed, settings)
