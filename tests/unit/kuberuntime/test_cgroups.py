"""remove_cgroup_tree removes a cgroup subtree in every hierarchy, deepest first, and never the root."""

from __future__ import annotations

from pathlib import Path

import pytest

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
