"""The DRA manager's seams to the runtime manager: the pod's claims prepared before its sandbox, and a container's
CDI devices into its CRI ContainerConfig (upstream: PrepareDynamicResources and the DRA part of the container
manager's GetResources, which kuberuntime's generateContainerConfig turns into `CDI_devices`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from cri.v1 import api_pb2
from nodeagent.dra.manager import DRAError, DRAManager
from nodeagent.kuberuntime.errors import CreateContainerConfigError

ContainerHook = Callable[[Mapping[str, Any], Mapping[str, Any], api_pb2.ContainerConfig], Awaitable[None]]


def prepare_resources(manager: DRAManager) -> Callable[[Mapping[str, Any]], Awaitable[str | None]]:
    async def prepare(pod: Mapping[str, Any]) -> str | None:
        try:
            await manager.prepare_resources(pod)
        except DRAError as exc:
            return str(exc)
        return None

    return prepare


def container_resources(manager: DRAManager) -> ContainerHook:
    """The container's CDI devices after those a device plugin gave it, as upstream appends them."""

    async def add(pod: Mapping[str, Any], container: Mapping[str, Any], config: api_pb2.ContainerConfig) -> None:
        try:
            names = manager.cdi_devices(pod, container)
        except DRAError as exc:
            raise CreateContainerConfigError(str(exc)) from exc
        config.CDI_devices.extend(api_pb2.CDIDevice(name=name) for name in names)

    return add


def chain(hooks: Sequence[ContainerHook]) -> ContainerHook:
    """One container hook that runs `hooks` in order."""

    async def run(pod: Mapping[str, Any], container: Mapping[str, Any], config: api_pb2.ContainerConfig) -> None:
        for hook in hooks:
            await hook(pod, container, config)

    return run
