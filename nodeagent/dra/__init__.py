"""Dynamic Resource Allocation, the kubelet side (upstream pkg/kubelet/cm/dra): DRA drivers' kubelet plugins
registered through the plugin watcher (`plugins`), a pod's ResourceClaims prepared before its sandbox and unprepared
after its containers stop (`manager`), their CDI devices passed to CreateContainer, and the claim cache checkpointed
across restarts (`claiminfo`)."""

from nodeagent.dra.manager import FAILED_PREPARE_DYNAMIC_RESOURCES, DRAError, DRAManager, claim_reader
from nodeagent.dra.plugins import DRAPluginManager, resource_slice_wiper

__all__ = [
    "FAILED_PREPARE_DYNAMIC_RESOURCES",
    "DRAError",
    "DRAManager",
    "DRAPluginManager",
    "claim_reader",
    "resource_slice_wiper",
]
