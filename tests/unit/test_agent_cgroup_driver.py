"""The agent refuses a cgroupDriver or a host it cannot honour instead of running as if the setting were absent."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from nodeagent.agent import cgroup_driver_problem, selinux_problem, systemd_booted
from nodeagent.config.kubelet_config import CgroupDriver, KubeletConfiguration


@pytest.mark.parametrize("systemd", [False, True])
def test_cgroupfs_is_accepted_on_any_host(systemd: bool) -> None:
    config = replace(KubeletConfiguration(), cgroup_driver=CgroupDriver.CGROUPFS)
    assert cgroup_driver_problem(config, systemd=systemd) is None


@pytest.mark.parametrize(
    ("systemd", "start"),
    [
        (False, 'cgroupDriver: "systemd" needs systemd as the init system (PID 1), and this host has none'),
        (True, 'cgroupDriver: "systemd" is not supported yet: nodeagent makes pod cgroups as cgroupfs directories'),
    ],
)
def test_systemd_is_refused_with_what_is_missing(systemd: bool, start: str) -> None:
    problem = cgroup_driver_problem(
        replace(KubeletConfiguration(), cgroup_driver=CgroupDriver.SYSTEMD), systemd=systemd
    )
    assert problem is not None
    assert problem.startswith(start)
    assert "set cgroupDriver: cgroupfs" in problem
    assert ("StartTransientUnit" in problem) is systemd


def test_systemd_booted_is_its_run_directory(tmp_path: Path) -> None:
    assert not systemd_booted(tmp_path / "system")
    (tmp_path / "system").mkdir()
    assert systemd_booted(tmp_path / "system")


def test_a_host_with_selinux_on_is_refused_with_a_clear_message() -> None:
    # nodeagent labels no pod volume; on an SELinux host each pod's volumes would be wrongly labelled and its
    # seLinuxChangePolicy ignored. Without SELinux the field has no effect, upstream included.
    problem = selinux_problem(True)
    assert problem is not None
    assert problem.startswith("SELinux is enabled on this host")
    assert "seLinuxChangePolicy" in problem
    assert selinux_problem(False) is None
