"""A pod whose data directories cannot be made (a full root dir) gets upstream's event and a retry, and the agent goes
on: the OSError used to leave the pod worker's sync with a traceback and no event (issue 34)."""

from __future__ import annotations

import errno
from typing import Any

from nodeagent.kubelet import VOLUME_RETRY_SECONDS, Kubelet, go_path_error
from nodeagent.podworkers import UpdateType
from tests.unit.fakeclock import FakeClock
from tests.unit.test_activedeadline import Events, FakeRuntime, Statuses, cached, kubelet, pod


class FullRootDir:
    """The volume manager on a full filesystem: making the pod's directories fails."""

    def __init__(self) -> None:
        self.full = True
        self.waited: list[str] = []

    def make_pod_dirs(self, uid: str) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device", f"/var/lib/kubelet/pods/{uid}")

    async def wait_for_attach_and_mount(self, pod: dict[str, Any], **_: Any) -> None:
        self.waited.append(pod["metadata"]["uid"])


def with_volumes(k: Kubelet, volumes: FullRootDir) -> Kubelet:
    k.volumes = volumes  # type: ignore[assignment]
    return k


async def test_a_full_root_dir_is_an_event_and_a_retry_then_the_pod_starts() -> None:
    clock, runtime, statuses, events = FakeClock(), FakeRuntime(), Statuses(), Events()
    volumes = FullRootDir()
    k = with_volumes(kubelet(clock, runtime, statuses, events), volumes)
    the_pod = pod(deadline=None)
    assert not await k.sync_pod(UpdateType.CREATE, the_pod, cached())
    assert runtime.calls == [] and volumes.waited == []
    assert events.recorded == [
        (
            "Warning",
            "FailedToMakePodDataDirectories",
            "error making pod data directories: mkdir /var/lib/kubelet/pods/u1: no space left on device",
        )
    ]
    assert statuses.published["u1"]["phase"] == "Pending"
    assert k._next_sync["u1"] == clock.monotonic() + VOLUME_RETRY_SECONDS
    volumes.full = False  # space came back
    assert not await k.sync_pod(UpdateType.SYNC, the_pod, cached())
    assert volumes.waited == ["u1"] and runtime.calls == [("sync_pod", "u1")]


def test_go_path_error() -> None:
    assert go_path_error("mkdir", OSError(errno.EACCES, "Permission denied", "/x")) == "mkdir /x: permission denied"
    assert go_path_error("mkdir", OSError("plain")) == "plain"
