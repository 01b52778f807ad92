"""remove_cgroup_tree removes a cgroup subtree in every hierarchy, deepest first, and never the root."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nodeagent.kuberuntime import cgroups
from nodeagent.kuberuntime.cgroups import remove_cgroup_tree


def test_removes_the_subtree_in_each_v1_hierarchy(tmp_path: Path) -> None:
    for controller in ("memory", "cpu"):
        (tmp_path / controller / "root" / "kubepods" / "besteffort" / "podA" / "ctr").mkdir(parents=True)
        (tmp_path / controller / "root" / "kubepods" / "besteffort" / "podB").mkdir(parents=True)
    removed = remove_cgroup_tree("/root/kubepods/besteffort/podA", root=tmp_path)
    assert removed == 4
    for controller in ("memory", "cpu"):
        assert not (tmp_path / controller / "root/kubepods/besteffort/podA").exists()
        assert (tmp_path / controller / "root/kubepods/besteffort/podB").exists()


def test_v2_unified_tree(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    (tmp_path / "root" / "kubepods" / "podA").mkdir(parents=True)
    assert remove_cgroup_tree("root", root=tmp_path) == 3
    assert not (tmp_path / "root").exists()


def test_refuses_the_root(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="root cgroup"):
        remove_cgroup_tree("/", root=tmp_path)


def test_kill_cgroup_processes_kills_everything_below(tmp_path: Path) -> None:
    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:
        leaf = tmp_path / "cpu" / "kubepods" / "podx" / "ctr"
        leaf.mkdir(parents=True)
        (leaf / "cgroup.procs").write_text(f"{sleepers[0].pid}\n")
        (leaf.parent / "cgroup.procs").write_text(f"{sleepers[1].pid}\n")
        (tmp_path / "memory" / "kubepods" / "podx" / "ctr").mkdir(parents=True)
        (tmp_path / "memory" / "kubepods" / "podx" / "ctr" / "cgroup.procs").write_text(f"{sleepers[0].pid}\n")
        assert cgroups.kill_cgroup_processes("/kubepods/podx", root=tmp_path) == 2
        assert [p.wait(5) for p in sleepers] == [-9, -9]
        assert cgroups.kill_cgroup_processes("/kubepods/absent", root=tmp_path) == 0
        with pytest.raises(ValueError):
            cgroups.kill_cgroup_processes("/", root=tmp_path)
    finally:
        for p in sleepers:
            if p.poll() is None:
                p.kill()
