"""A task containerd keeps for a container its CRI record calls Created (what a StartContainer cut off by a killed
agent leaves, containerd issue 11037) is ended through containerd's task API, after which RemoveContainer works.

The state is made deterministically on the real containerd: CRI creates the container, then `ctr task start` gives it
a running task behind CRI's back. containerd then refuses RemoveContainer exactly as after the crash ("cannot delete
running task ...: failed precondition"), until `ContainerdTasks.end`.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import tempfile
import uuid

import pytest

from cri.client import CRIClient
from cri.errors import CRIError, NotFoundError
from cri.v1 import api_pb2
from nodeagent.testbed import configs
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed


async def test_a_task_kept_behind_cris_back_is_ended_and_the_container_removed(
    testbed: Testbed, settings: Settings, cri_client: CRIClient
) -> None:
    runtime = cri_client.runtime
    ref = await cri_client.image.pull_image(api_pb2.ImageSpec(image=configs.busybox_image(settings)))
    uid = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="nodeagent-tasks-") as logs:
        sandbox_config = api_pb2.PodSandboxConfig(
            metadata=api_pb2.PodSandboxMetadata(name=f"kept-{uid[:6]}", namespace="default", uid=uid),
            log_directory=logs,
            linux=api_pb2.LinuxPodSandboxConfig(
                security_context=api_pb2.LinuxSandboxSecurityContext(
                    namespace_options=api_pb2.NamespaceOption(network=api_pb2.NODE)
                )
            ),
        )
        sandbox = await runtime.run_pod_sandbox(sandbox_config)
        try:
            config = api_pb2.ContainerConfig(
                metadata=api_pb2.ContainerMetadata(name="kept"),
                image=api_pb2.ImageSpec(image=ref),
                command=["sleep", "3600"],
                log_path="kept.log",
            )
            container = await runtime.create_container(sandbox, config, sandbox_config)
            ctr = ["ctr", "--address", str(testbed.layout.containerd_socket), "-n", "k8s.io"]
            started = await asyncio.to_thread(
                subprocess.run,
                [*ctr, "task", "start", "-d", "--null-io", container],
                check=False,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert started.returncode == 0, started.stderr
            status = await runtime.container_status(container)
            assert status.status.state == api_pb2.CONTAINER_CREATED  # CRI never saw it start
            with pytest.raises(CRIError, match="cannot delete running task"):
                await runtime.remove_container(container)

            await cri_client.containerd_tasks.end(container)
            await runtime.remove_container(container)
            with pytest.raises(NotFoundError):
                await runtime.container_status(container)
        finally:
            with contextlib.suppress(CRIError):
                await runtime.stop_pod_sandbox(sandbox)
                await runtime.remove_pod_sandbox(sandbox)
