"""The agent's root dir on a full filesystem: a pod that needs space there is refused with a clear event, the agent
stays up, and the pod starts once space returns (issue 34).

The agent runs with --root-dir on a small loop-mounted ext4 (no reserved blocks) that the test fills with one file
until ENOSPC. nodefs eviction is off (evictionHard names memory only), so the writes themselves fail rather than
the eviction manager refusing the pod first. The pod has an emptyDir and a downward API volume, both made under
<root-dir>/pods/<uid>/volumes by the agent. Then the file is removed and the same pod must start without help.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import (
    NS,
    Agent,
    agent_config,
    clean_up,
    eventually,
    one_container_pod,
    start_agent,
    stop_agent,
    wait_node_ready,
    wait_running,
)

SIZE = "24M"
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]


@pytest.fixture(scope="module")
def root_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A small ext4 mounted on a loop device; unmounted (with whatever the agent mounted below) and removed after."""
    base = tmp_path_factory.mktemp("rootfs")
    image, mount = base / "rootfs.img", base / "root"
    mount.mkdir()
    subprocess.run(["truncate", "-s", SIZE, str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-R", str(mount)], check=False)
        image.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings, root_dir: Path) -> Iterator[Agent]:
    asyncio.run(clean_up(testbed, settings))
    config = agent_config(testbed, root_dir.parent / "nodeagent.yaml", evictionHard={"memory.available": "1Mi"})
    running = start_agent(
        testbed,
        testbed.layout.logs / "agent-root-dir-full.log",
        config=config,
        args=("--kubeconfig", "<node>", "--root-dir", str(root_dir)),  # the last --root-dir wins
    )
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


def fill(directory: Path) -> Path:
    """One file taking every free block of the filesystem (1 MiB writes, then 4 KiB and 512 B ones, to ENOSPC)."""
    path = directory / "fill"
    with path.open("wb", buffering=0) as f:
        for size in (1 << 20, 4096, 512):
            chunk = bytes(size)
            with contextlib.suppress(OSError):
                while True:
                    f.write(chunk)
            with contextlib.suppress(OSError):
                os.fsync(f.fileno())
    return path


async def pod_events(admin: KubeClient, name: str) -> list[dict[str, Any]]:
    listed = await admin.list(paths.events(NS), field_selector=f"involvedObject.name={name}")
    items: list[dict[str, Any]] = listed["items"]
    return items


async def test_a_full_root_dir_is_reported_and_recovered_from(
    agent: Agent, testbed: Testbed, settings: Settings, admin: KubeClient, root_dir: Path
) -> None:
    await wait_node_ready(admin, agent, settings.node_name)

    async def started() -> bool:
        # The Node is Ready from its registration on, before the agent has made the rest of its root dir (the
        # PodResources socket's directory): a disk filled then makes the start-up fail, which upstream's kubelet
        # does not survive either (a CI run at 866475f: ENOSPC on <root-dir>/pod-resources, 0.1 s after Ready).
        return "agent running node=" in agent.log.read_text(errors="replace")

    await eventually(started, timeout=60, what="the agent's start-up done", agent=agent)
    assert (root_dir / "device-plugins").is_dir(), "the agent does not use the loop filesystem as its root dir"
    name = f"full-{uuid.uuid4().hex[:5]}"
    container = {
        "image": configs.busybox_image(settings),
        "command": COMMAND,
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}, {"name": "info", "mountPath": "/info"}],
    }
    volumes = [
        {"name": "scratch", "emptyDir": {}},
        {"name": "info", "downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
    ]
    filler = await asyncio.to_thread(fill, root_dir)
    free = shutil.disk_usage(root_dir).free
    try:
        assert free < 4096, f"{free} bytes still free"
        await admin.create(paths.pods(NS), one_container_pod(name, container, {"test": "full"}, volumes=volumes))

        async def no_space_event() -> list[str]:
            messages = [f"{e['reason']}: {e.get('message', '')}" for e in await pod_events(admin, name)]
            return [m for m in messages if "no space left on device" in m]

        told = await eventually(no_space_event, timeout=45, what="an event saying the disk is full", agent=agent)
        print(f"events while full: {told}")
        pod = await admin.get(paths.pod(NS, name))
        assert not (pod.get("status") or {}).get("containerStatuses") or all(
            "running" not in (cs.get("state") or {}) for cs in pod["status"]["containerStatuses"]
        ), "the pod runs although its volumes could not be made"
        assert agent.proc.poll() is None, f"the agent exited on a full root dir\n{agent.tail()}"
        filler.unlink()
        await wait_running(admin, agent, name, "main", timeout=60)
        assert agent.proc.poll() is None
        assert "Traceback" not in agent.log.read_text(errors="replace"), agent.tail()
    finally:
        filler.unlink(missing_ok=True)
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, name), grace_period_seconds=0)
