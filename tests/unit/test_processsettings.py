"""The agent's own process and host from the config: failCgroupV1 on a v1 host, maxOpenFiles and oomScoreAdj (set,
or logged when refused, as upstream), and podsPerCore capping the node's pod capacity."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from nodeagent.config import KubeletConfiguration
from nodeagent.nodestatus.node import pod_capacity
from nodeagent.processsettings import ProcessControls, apply_process_settings, cgroup_v1_problem, host_is_unified

DEFAULT = KubeletConfiguration()


@pytest.mark.parametrize(
    ("fail", "unified", "refused"), [(False, False, False), (True, True, False), (True, False, True)]
)
def test_fail_cgroup_v1_refuses_a_v1_host_only(fail: bool, unified: bool, refused: bool) -> None:
    problem = cgroup_v1_problem(replace(DEFAULT, fail_cgroup_v1=fail), unified=unified)
    assert (problem is not None) is refused
    if problem is not None:
        assert "not run on a host using cgroup v1" in problem


def test_the_unified_hierarchy_is_told_by_cgroup_controllers(tmp_path: Path) -> None:
    assert host_is_unified(str(tmp_path)) is False
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    assert host_is_unified(str(tmp_path)) is True


def test_open_files_and_oom_score_are_set_from_the_config() -> None:
    calls: list[tuple[str, int]] = []
    controls = ProcessControls(
        set_nofile=lambda n: calls.append(("nofile", n)), set_oom_score_adj=lambda v: calls.append(("oom", v))
    )
    assert apply_process_settings(DEFAULT, controls) == []
    assert calls == [("nofile", 1_000_000), ("oom", -999)]  # upstream's defaults
    calls.clear()
    apply_process_settings(replace(DEFAULT, max_open_files=4096, oom_score_adj=0), controls)
    assert calls == [("nofile", 4096), ("oom", 0)]


def test_a_refusal_is_logged_and_start_up_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    def refuse(_: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    failed = apply_process_settings(DEFAULT, ProcessControls(set_nofile=refuse, set_oom_score_adj=refuse))
    assert [f.split(":")[0] for f in failed] == ["maxOpenFiles=1000000", "oomScoreAdj=-999"]
    assert "failed to set rlimit on max file handles" in caplog.text
    assert "failed to apply oom score adj" in caplog.text


@pytest.mark.parametrize(("per_core", "cpus", "pods"), [(0, 2, 110), (10, 2, 20), (100, 2, 110)])
def test_pods_per_core_caps_the_pod_capacity(per_core: int, cpus: int, pods: int) -> None:
    assert pod_capacity(replace(DEFAULT, pods_per_core=per_core), cpus) == pods
