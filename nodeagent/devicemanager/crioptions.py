"""A container's device options into its CRI ContainerConfig, where upstream's runtime manager puts them
(kuberuntime generateContainerConfig over the options GetResources returned)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from cri.v1 import api_pb2
from nodeagent.devicemanager.manager import DeviceManager, DeviceManagerError
from nodeagent.devicemanager.poddevices import DeviceRunContainerOptions
from nodeagent.kuberuntime.errors import CreateContainerConfigError


def apply_device_options(config: api_pb2.ContainerConfig, options: DeviceRunContainerOptions | None) -> None:
    """Adds the devices' entries to `config` as upstream orders them: their environment, devices and mounts before
    the container's own (which come from the spec and its volumes), their CDI devices, and their annotations under
    the kubelet's own (a key the kubelet sets keeps the kubelet's value)."""
    if options is None:
        return
    envs = [api_pb2.KeyValue(key=k, value=v) for k, v in options.envs] + list(config.envs)
    del config.envs[:]
    config.envs.extend(envs)
    devices = [
        api_pb2.Device(host_path=host, container_path=path, permissions=permissions)
        for host, path, permissions in options.devices
    ] + list(config.devices)
    del config.devices[:]
    config.devices.extend(devices)
    mounts = [
        api_pb2.Mount(host_path=host, container_path=path, readonly=read_only)
        for host, path, read_only in options.mounts
    ] + list(config.mounts)
    del config.mounts[:]
    config.mounts.extend(mounts)
    for key, value in options.annotations:
        if key not in config.annotations:
            config.annotations[key] = value
    config.CDI_devices.extend(api_pb2.CDIDevice(name=name) for name in options.cdi_devices)


def container_resources(
    manager: DeviceManager,
) -> Callable[[Mapping[str, Any], Mapping[str, Any], api_pb2.ContainerConfig], Awaitable[None]]:
    """The runtime manager's hook: the container's device options into its config; a failure is the container's
    CreateContainerConfigError with the device manager's text, as upstream's generateContainerConfig reports it."""

    async def add(pod: Mapping[str, Any], container: Mapping[str, Any], config: api_pb2.ContainerConfig) -> None:
        try:
            options = await manager.run_container_options(pod, container)
        except DeviceManagerError as exc:
            raise CreateContainerConfigError(str(exc)) from exc
        apply_device_options(config, options)

    return add
