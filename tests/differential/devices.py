"""The device plugin and the DRA driver a scenario needs (`devices:`), run beside each agent as a user runs them.

- `device-plugin`: upstream's sample device plugin (nodeagent/testbed/sampledeviceplugin.py: `example.com/resource`,
  Dev-1 and Dev-2), registered on the agent's `<root-dir>/device-plugins/kubelet.sock`; ready when the Node's
  allocatable shows both devices.
- `dra-driver`: the project's sample DRA driver (nodeagent/testbed/sampledradriver.py, `dra.nodeagent.test`), its
  registration socket in the agent's `<root-dir>/plugins_registry`, its CDI specs in the testbed's containerd
  `cdi_spec_dirs`; ready when the agent told it it is registered and its ResourceSlice is published.

Each scenario that names them starts them after its agent is up and stops them after its pods are gone (so the DRA
claims were unprepared by the agent that prepared them); the same binary and the same driver for both agents, each
on its own root dir.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import sampledeviceplugin as plugin
from nodeagent.testbed import sampledradriver as driver
from nodeagent.testbed.install import Progress
from nodeagent.testbed.processes import stop_children
from nodeagent.testbed.testbed import Testbed
from tests.differential.scenario import DEVICE_KINDS

DEVICE_PLUGIN, DRA_DRIVER = DEVICE_KINDS
READY_TIMEOUT = 60.0
REGISTERED = "registration status registered=True"


def device_names(kinds: tuple[str, ...]) -> dict[str, str]:
    """The names a scenario's devices put in a container that may differ between two agents, by placeholder: which
    of the sample plugin's free devices a container gets is not defined. Upstream's device manager takes the first
    of a set it ranges over (devicesToAllocate: Go map order, so either device); nodeagent takes them in order.
    Seen in a full corpus run (2026-11-30): the kubelet mounted /tmp/Dev-2 where every earlier run had /tmp/Dev-1."""
    if DEVICE_PLUGIN not in kinds:
        return {}
    return {f"/tmp/{device}": "device-plugin device" for device in plugin.DEVICES}


@dataclass
class Devices:
    """The processes started for one scenario on one agent."""

    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def stop(self) -> None:
        stop_children(self.started)
        self.started.clear()
        for device in plugin.DEVICES:  # the files the sample plugin's Allocate made on the host
            Path("/tmp", device).unlink(missing_ok=True)


async def _until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not seen in {READY_TIMEOUT:.0f}s")
        await asyncio.sleep(0.2)


async def start(
    kinds: tuple[str, ...],
    testbed: Testbed,
    admin: KubeClient,
    root_dir: Path,
    log_dir: Path,
    label: str,
    *,
    plugin_dir: Path | None = None,
) -> Devices:
    """`kinds` started for the agent of `root_dir` and waited for; stopped again if one is not ready. `plugin_dir`:
    where the agent's device manager listens (default `<root_dir>/device-plugins`, nodeagent's; the upstream
    kubelet's is /var/lib/kubelet/device-plugins whatever its --root-dir)."""
    devices = Devices()
    node = testbed.settings.node_name
    try:
        if DEVICE_PLUGIN in kinds:
            binary = await asyncio.to_thread(plugin.build_sample_device_plugin, Progress(lambda message: None))
            where = plugin_dir or root_dir / "device-plugins"
            devices.started.append(plugin.start_in(binary, where, log_dir / f"sample-device-plugin-{label}.log"))

            async def advertised() -> bool:
                status = (await admin.get(paths.node(node))).get("status") or {}
                return (status.get("allocatable") or {}).get(plugin.RESOURCE) == str(len(plugin.DEVICES))

            await _until(advertised, f"{plugin.RESOURCE} on the Node ({label})")
        if DRA_DRIVER in kinds:
            driver_log = log_dir / f"sample-dra-driver-{label}.log"
            offset = driver_log.stat().st_size if driver_log.exists() else 0
            devices.started.append(
                driver.start(
                    root_dir=root_dir,
                    cdi_dir=testbed.layout.cdi_spec_dir,
                    kubeconfig=testbed.layout.admin_kubeconfig,
                    node_name=node,
                    log_path=driver_log,
                    record=log_dir / f"sample-dra-driver-{label}.jsonl",
                )
            )

            async def registered() -> bool:
                text = await asyncio.to_thread(driver_log.read_bytes)
                return REGISTERED.encode() in text[offset:]

            async def published() -> bool:
                name = driver.slice_name(node, driver.DRIVER)
                path = paths.api_path("resourceslices", group="resource.k8s.io", version="v1", name=name)
                with contextlib.suppress(NotFound):
                    await admin.get(path)
                    return True
                return False

            await _until(registered, f"the DRA driver registered ({label})")
            await _until(published, f"the DRA driver's ResourceSlice ({label})")
    except BaseException:
        await asyncio.to_thread(devices.stop)
        raise
    return devices
