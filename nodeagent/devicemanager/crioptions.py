"""A container's device options into its CRI ContainerConfig, where upstream's runtime manager puts them
(kuberuntime generateContainerConfig over the options GetResources returned)."""

from __future__ import annotations

from cri.v1 import api_pb2
from nodeagent.devicemanager.poddevices import DeviceRunContainerOptions


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
