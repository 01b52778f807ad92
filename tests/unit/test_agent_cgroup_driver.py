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


@pytest.mark.parametrize("systemd", [False, True])
def test_cgroupfs_is_accepted_on_cgroup_v1_too(systemd: bool) -> None:
    config = replace(KubeletConfiguration(), cgroup_driver=CgroupDriver.CGROUPFS)
    assert cgroup_driver_problem(config, systemd=systemd, unified=False) is None


def test_systemd_is_accepted_with_systemd_as_pid_1_on_cgroup_v2() -> None:
    config = replace(KubeletConfiguration(), cgroup_driver=CgroupDriver.SYSTEMD)
    assert cgroup_driver_problem(config, systemd=True, unified=True) is None


@pytest.mark.parametrize(
    ("unified", "start"),
    [
        # This project's dev hosts: no systemd as PID 1, cgroup v1 (hybrid). The missing init system is the reason.
        (False, 'cgroupDriver: "systemd" needs systemd as the init system (PID 1), and this host has none'),
        (True, 'cgroupDriver: "systemd" needs systemd as the init system (PID 1), and this host has none'),
    ],
)
def test_systemd_is_refused_without_systemd_as_pid_1(unified: bool, start: str) -> None:
    problem = cgroup_driver_problem(
        replace(KubeletConfiguration(), cgroup_driver=CgroupDriver.SYSTEMD), systemd=False, unified=unified
    )
    assert problem is not None
    assert problem.startswith(start)
    assert "/run/systemd/system is missing" in problem
    assert "set cgroupDriver: cgroupfs" in problem
    assert "SystemdCgroup = false" in problem


def test_systemd_on_cgroup_v1_is_refused_with_the_way_out() -> None:
    problem = cgroup_driver_problem(
        replace(KubeletConfiguration(), cgroup_driver=CgroupDriver.SYSTEMD), systemd=True, unified=False
    )
    assert problem is not None
    assert problem.startswith('cgroupDriver: "systemd" is supported on the unified cgroup v2 hierarchy only')
    assert "systemd.unified_cgroup_hierarchy=1" in problem
    assert "set cgroupDriver: cgroupfs" in problem


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
