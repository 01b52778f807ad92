"""Device plugins (upstream pkg/kubelet/cm/devicemanager): the v1beta1 registration server, the plugins' devices as
extended resources, their allocation to containers, and the checkpoint that keeps allocations across restarts."""

from nodeagent.devicemanager.crioptions import apply_device_options, container_resources
from nodeagent.devicemanager.manager import (
    API_VERSION,
    UNEXPECTED_ADMISSION_ERROR,
    DeviceManager,
    DeviceManagerError,
    is_extended_resource_name,
    running_containers,
)
from nodeagent.devicemanager.poddevices import DeviceRunContainerOptions

__all__ = [
    "API_VERSION",
    "UNEXPECTED_ADMISSION_ERROR",
    "DeviceManager",
    "DeviceManagerError",
    "DeviceRunContainerOptions",
    "apply_device_options",
    "container_resources",
    "is_extended_resource_name",
    "running_containers",
]
