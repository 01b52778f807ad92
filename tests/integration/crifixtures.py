"""Small builders of CRI requests for tests that drive containerd directly through the project's client."""

from __future__ import annotations

import uuid
from pathlib import Path

from cri.v1 import api_pb2


def sandbox_config(name: str, log_dir: Path) -> api_pb2.PodSandboxConfig:
    uid = str(uuid.uuid4())
    log_dir.mkdir(parents=True, exist_ok=True)
    return api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name=name, uid=uid, namespace="nodeagent-tests", attempt=0),
        hostname=name,
        log_directory=str(log_dir),
        labels={
            "io.kubernetes.pod.name": name,
            "io.kubernetes.pod.namespace": "nodeagent-tests",
            "io.kubernetes.pod.uid": uid,
        },
        linux=api_pb2.LinuxPodSandboxConfig(),
    )


def container_config(name: str, image: str, command: list[str]) -> api_pb2.ContainerConfig:
    return api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name=name, attempt=0),
        image=api_pb2.ImageSpec(image=image),
        command=command,
        log_path=f"{name}/0.log",
        labels={"io.kubernetes.container.name": name},
        linux=api_pb2.LinuxContainerConfig(),
    )
