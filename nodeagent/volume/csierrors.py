"""A set up that failed in a named step of upstream's mount operation (operation_generator.go), so the FailedMount
event reads as upstream's: `MountVolume.MountDevice failed for volume "pv-1" : rpc error: code = ... desc = ...`.

Plain SetUpErrors read `MountVolume.SetUp failed for volume "<pod volume name>" : ...`; a CSI volume's step and the
name upstream shows (the PV's name for a claim: upstream's spec.Name()) travel on this subclass.
"""

from __future__ import annotations

from nodeagent.volume.errors import SetUpError

SET_UP = "MountVolume.SetUp"
MOUNT_DEVICE = "MountVolume.MountDevice"
WAIT_FOR_ATTACH = "MountVolume.WaitForAttach"
# The steps of upstream's GenerateMapVolumeFunc (a Block volume used as a device).
SET_UP_DEVICE = "MapVolume.SetUpDevice"
MAP_POD_DEVICE = "MapVolume.MapPodDevice"
MAP_BLOCK_VOLUME = "MapVolume.MapBlockVolume"


class MountOperationError(SetUpError):
    """`uncertain`: the volume may be (partly) set up (staged, or a driver call that may still run), so the volume
    manager keeps it to tear down should its pod go away before a retry succeeds (upstream's uncertain state)."""

    def __init__(self, message: str, *, operation: str = SET_UP, spec_name: str = "", uncertain: bool = False) -> None:
        super().__init__(message)
        self.operation = operation
        self.spec_name = spec_name
        self.uncertain = uncertain


def is_uncertain(exc: SetUpError) -> bool:
    return isinstance(exc, MountOperationError) and exc.uncertain


def event_message(exc: SetUpError, volume_name: str) -> str:
    """The FailedMount message of a failed set up of the pod's volume `volume_name`."""
    if isinstance(exc, MountOperationError):
        return f'{exc.operation} failed for volume "{exc.spec_name or volume_name}" : {exc}'
    return f'{SET_UP} failed for volume "{volume_name}" : {exc}'
