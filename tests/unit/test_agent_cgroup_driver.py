"""The agent refuses a cgroupDriver or a host it cannot honour instead of running as if the setting were absent."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nodeagent.agent import cgroup_driver_problem, selinux_problem
from nodeagent.config.kubelet_config import CgroupDriver, KubeletConfiguration


@pytest.mark.parametrize(
    ("driver", "refused"),
    [(CgroupDriver.CGROUPFS, False), (CgroupDriver.SYSTEMD, True)],
)
def test_only_cgroupfs_is_accepted(driver: CgroupDriver, refused: bool) -> None:
    problem = cgroup_driver_problem(replace(KubeletConfiguration(), cgroup_driver=driver))
    if refused:
        assert problem is not None
        assert problem.startswith('cgroupDriver: "systemd" is not supported')
        assert "cgroupDriver: cgroupfs" in problem
    else:
        assert problem is None


def test_a_host_with_selinux_on_is_refused_with_a_clear_message() -> None:
    # nodeagent labels no pod volume; on an SELinux host each pod's volumes would be wrongly labelled and its
    # seLinuxChangePolicy ignored. Without SELinux the field has no effect, upstream included.
    problem = selinux_problem(True)
    assert problem is not None
    assert problem.startswith("SELinux is enabled on this host")
    assert "seLinuxChangePolicy" in problem
    assert selinux_problem(False) is None
