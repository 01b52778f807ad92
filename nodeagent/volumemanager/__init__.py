"""The volume manager (upstream pkg/kubelet/volumemanager): desired and actual state, the reconciler, and the
waits the pod sync uses. The plugins themselves are `nodeagent.volume`."""

from __future__ import annotations

from nodeagent.volumemanager.build import new_volume_manager
from nodeagent.volumemanager.manager import VolumeManager, VolumeWaitError

__all__ = ["VolumeManager", "VolumeWaitError", "new_volume_manager"]
