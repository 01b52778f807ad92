"""The volume package's exceptions, mapped at its edge: plugins turn OSError, API and mount failures into these.

`str()` of a `SetUpError` is what follows upstream's `MountVolume.SetUp failed for volume "NAME" : ` in the
FailedMount event, so it is written for the pod's owner (upstream's wording wherever upstream has one).
"""

from __future__ import annotations


class VolumeError(Exception):
    """Base of everything the volume package raises."""


class SetUpError(VolumeError):
    """A volume could not be set up (or refreshed); the message goes into the FailedMount event."""


class TearDownError(VolumeError):
    """A volume could not be torn down; the reconciler retries."""


class MountError(VolumeError):
    """mount(2) or umount(2) failed."""


class UnsupportedVolumeError(VolumeError):
    """No plugin handles this volume type on this node (persistentVolumeClaim, csi, nfs, ...)."""


class PayloadError(SetUpError):
    """An item path of a configMap/secret/downwardAPI/projected volume is refused (absolute, `..`, too long)."""


class SubPathError(VolumeError):
    """A subPath cannot be prepared. `message` is what the container's event says (upstream keeps host details out
    of it); `detail` is for the log."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail or message
