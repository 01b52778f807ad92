"""The systemd driver's slice names for the kubelet's cgroups, as upstream's ToSystemd / ExpandSlice /
ParseSystemdToCgroupName spell them."""

from __future__ import annotations

import pytest

from nodeagent.kuberuntime.qos import QOSClass
from nodeagent.kuberuntime.sandbox_config import pod_cgroup_parent
from nodeagent.kuberuntime.systemd_cgroup_names import (
    SliceNameError,
    container_cgroup,
    driver_cgroup,
    expand_slice,
    from_systemd,
    to_systemd,
)

UID = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
ESCAPED = "1b4e28ba_2fa1_11d2_883f_0016d3cca427"


@pytest.mark.parametrize(
    ("qos", "systemd"),
    [
        (QOSClass.GUARANTEED, f"/kubepods.slice/kubepods-pod{ESCAPED}.slice"),
        (
            QOSClass.BURSTABLE,
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{ESCAPED}.slice",
        ),
        (
            QOSClass.BEST_EFFORT,
            f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{ESCAPED}.slice",
        ),
    ],
)
def test_pod_cgroups_as_slices(qos: QOSClass, systemd: str) -> None:
    cgroupfs = pod_cgroup_parent(UID, qos, "/")
    assert to_systemd(cgroupfs) == systemd
    assert from_systemd(systemd) == cgroupfs


@pytest.mark.parametrize(
    ("cgroupfs", "systemd"),
    [
        ("/", "/"),
        ("/kubepods", "/kubepods.slice"),
        ("/kubepods/burstable", "/kubepods.slice/kubepods-burstable.slice"),
        ("/system-reserved", "/system_reserved.slice"),
    ],
)
def test_to_systemd(cgroupfs: str, systemd: str) -> None:
    assert to_systemd(cgroupfs) == systemd


@pytest.mark.parametrize(
    ("name", "expanded"),
    [
        ("-.slice", "/"),
        ("a.slice", "/a.slice"),
        ("a-b-c.slice", "/a.slice/a-b.slice/a-b-c.slice"),
    ],
)
def test_expand_slice(name: str, expanded: str) -> None:
    assert expand_slice(name) == expanded


@pytest.mark.parametrize("name", ["a", ".slice", "a/b.slice", "a--b.slice", "-a.slice", "a-.slice"])
def test_expand_slice_refuses(name: str) -> None:
    with pytest.raises(SliceNameError, match="invalid slice name"):
        expand_slice(name)


def test_from_systemd_of_the_root_slice() -> None:
    assert from_systemd("/") == "/"
    assert from_systemd("-.slice") == "/"


@pytest.mark.parametrize(
    ("driver", "expected"),
    [
        ("cgroupfs", f"/kubepods/burstable/pod{UID}"),
        ("systemd", f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{ESCAPED}.slice"),
    ],
)
def test_driver_cgroup_is_upstreams_cgroup_manager_name(driver: str, expected: str) -> None:
    assert driver_cgroup(pod_cgroup_parent(UID, QOSClass.BURSTABLE), driver) == expected


def test_a_container_below_its_pod_cgroup_per_driver() -> None:
    # runc (cgroupfs): <pod>/<id>; containerd with SystemdCgroup = true asks runc for "<slice>:cri-containerd:<id>",
    # a scope in the pod slice.
    assert container_cgroup("/kubepods/besteffort/podx", "abc", "cgroupfs") == "/kubepods/besteffort/podx/abc"
    assert (
        container_cgroup("/kubepods.slice/kubepods-podx.slice", "abc", "systemd")
        == "/kubepods.slice/kubepods-podx.slice/cri-containerd-abc.scope"
    )
