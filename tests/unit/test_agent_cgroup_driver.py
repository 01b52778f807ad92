"""The agent refuses a cgroupDriver it cannot honour instead of reading it and running as if it were absent."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nodeagent.agent import cgroup_driver_problem
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
