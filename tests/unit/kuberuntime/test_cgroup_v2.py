"""cgroup v2 for the cgroupfs driver: detection, the controllers turned on down to a pod cgroup, upstream's
shares/weight conversion, and the files a Guaranteed, a Burstable and a BestEffort pod's cgroup get.

The trees are directories shaped like the real mounts: v2 with cgroup.controllers at the top (the kernel's list on a
systemd host) and cgroup.subtree_control per level; v1 with one directory per controller; hybrid with the v1
controllers and a controller-less cgroup2 at unified/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodeagent.kuberuntime import cgroup_v2
from nodeagent.kuberuntime.cgroups import CgroupfsPodCgroups, PodResourceConfig, pod_resource_config
from nodeagent.kuberuntime.qos import pod_qos
from nodeagent.kuberuntime.sandbox_config import pod_cgroup_parent

ROOT_CONTROLLERS = "cpuset cpu io memory hugetlb pids rdma misc"
ALL_ENABLED = "+cpuset +cpu +io +memory +hugetlb +pids +rdma +misc"


def v2_tree(root: Path) -> Path:
    root.mkdir(exist_ok=True)
    (root / "cgroup.controllers").write_text(ROOT_CONTROLLERS + "\n")
    (root / "cgroup.subtree_control").write_text("")
    return root


def v1_tree(root: Path) -> Path:
    for controller in ("cpu", "memory", "pids", "cpuset"):
        (root / controller).mkdir(parents=True)
    return root


@pytest.mark.parametrize(
    ("shares", "weight"),
    [(2, 1), (3, 1), (102, 4), (512, 20), (1024, 39), (2048, 79), (262143, 9999), (262144, 10000), (300000, 10000)],
)
def test_shares_to_weight_as_upstream_get_cpu_weight(shares: int, weight: int) -> None:
    assert cgroup_v2.shares_to_weight(shares) == weight


@pytest.mark.parametrize(("weight", "shares"), [(1, 2), (39, 998), (79, 2046), (100, 2597), (10000, 262144)])
def test_weight_to_shares_as_upstream_cpu_weight_to_cpu_shares(weight: int, shares: int) -> None:
    assert cgroup_v2.weight_to_shares(weight) == shares


@pytest.mark.parametrize("weight", [0, 10001])
def test_weight_out_of_range_is_refused(weight: int) -> None:
    with pytest.raises(ValueError, match="CPU weight must be between 1 and 10000"):
        cgroup_v2.weight_to_shares(weight)


def test_detection(tmp_path: Path) -> None:
    assert cgroup_v2.is_unified(v2_tree(tmp_path / "v2"))
    assert not cgroup_v2.is_unified(v1_tree(tmp_path / "v1"))
    hybrid = v1_tree(tmp_path / "hybrid")
    (hybrid / "unified").mkdir()
    (hybrid / "unified" / "cgroup.controllers").write_text("\n")
    assert not cgroup_v2.is_unified(hybrid)


def test_controllers_are_enabled_on_every_level_above_the_new_cgroup(tmp_path: Path) -> None:
    root = v2_tree(tmp_path)
    made = cgroup_v2.create_cgroup_path(root, "/kubepods/burstable/podu-1")
    assert made == root / "kubepods" / "burstable" / "podu-1"
    assert made.is_dir()
    for level in (root, root / "kubepods", root / "kubepods" / "burstable"):
        assert (level / "cgroup.subtree_control").read_text() == ALL_ENABLED, level
    # The leaf's own children are the runtime's (runc enables what its containers need).
    assert not (made / "cgroup.subtree_control").exists()
    # Again: nothing breaks, nothing else is made.
    assert cgroup_v2.create_cgroup_path(root, "kubepods/burstable/podu-1") == made
    assert sorted(p.name for p in (root / "kubepods" / "burstable").iterdir()) == ["cgroup.subtree_control", "podu-1"]


def test_a_refused_batch_falls_back_to_one_controller_at_a_time(tmp_path: Path) -> None:
    root = v2_tree(tmp_path)
    (root / "cgroup.subtree_control").unlink()
    (root / "cgroup.subtree_control").mkdir()  # every write fails: none is fatal here
    made = cgroup_v2.create_cgroup_path(root, "kubepods/podu-2")
    assert made.is_dir()
    assert (root / "kubepods" / "cgroup.subtree_control").read_text() == ALL_ENABLED


def test_a_domain_invalid_level_stops_the_creation(tmp_path: Path) -> None:
    root = v2_tree(tmp_path)
    (root / "kubepods").mkdir()
    (root / "kubepods" / "cgroup.type").write_text("domain invalid\n")
    with pytest.raises(cgroup_v2.CgroupV2Error, match="invalid state"):
        cgroup_v2.create_cgroup_path(root, "kubepods/besteffort/podu-3")
    assert not (root / "kubepods" / "besteffort").exists()


def test_the_root_is_never_created(tmp_path: Path) -> None:
    with pytest.raises(cgroup_v2.CgroupV2Error):
        cgroup_v2.create_cgroup_path(v2_tree(tmp_path), "/")


def container(cpu_req: str | None, mem_req: str | None, cpu_lim: str | None, mem_lim: str | None) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu_req), ("memory", mem_req)) if v}
    limits = {k: v for k, v in (("cpu", cpu_lim), ("memory", mem_lim)) if v}
    return {"name": "c", "image": "i", "resources": {"requests": requests, "limits": limits}}


def pod(uid: str, *containers: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": uid, "namespace": "default"}, "spec": {"containers": list(containers)}}


GUARANTEED = pod("g-1", container("500m", "128Mi", "500m", "128Mi"))
BURSTABLE = pod("b-1", container("100m", "32Mi", None, "64Mi"))
BEST_EFFORT = pod("e-1", container(None, None, None, None))


@pytest.mark.parametrize(
    ("the_pod", "cgroup", "files"),
    [
        (
            GUARANTEED,
            "kubepods/podg-1",
            {"cpu.weight": "20", "cpu.max": "50000 100000", "memory.max": "134217728", "pids.max": "1024"},
        ),
        (BURSTABLE, "kubepods/burstable/podb-1", {"cpu.weight": "4", "memory.max": "67108864", "pids.max": "1024"}),
        (BEST_EFFORT, "kubepods/besteffort/pode-1", {"cpu.weight": "1", "pids.max": "1024"}),
    ],
    ids=["guaranteed", "burstable", "besteffort"],
)
def test_pod_cgroup_files_on_v2(tmp_path: Path, the_pod: dict[str, Any], cgroup: str, files: dict[str, str]) -> None:
    root = v2_tree(tmp_path)
    path = pod_cgroup_parent(the_pod["metadata"]["uid"], pod_qos(the_pod), "/")
    assert path == "/" + cgroup
    CgroupfsPodCgroups(root, pod_pids_limit=1024).ensure(path, pod_resource_config(the_pod))
    directory = root / cgroup
    written = {p.name: p.read_text() for p in directory.iterdir() if p.is_file()}
    # Exactly upstream's values: no memory.high (MemoryQoS is off by default), nothing for what the pod leaves open.
    assert written == files
    for level in (root, *[root / cgroup.rsplit("/", n)[0] for n in range(1, cgroup.count("/") + 1)]):
        assert (level / "cgroup.subtree_control").read_text() == ALL_ENABLED, level


def test_v2_values_read_back_as_upstream_reads_them(tmp_path: Path) -> None:
    root = v2_tree(tmp_path)
    cgroups = CgroupfsPodCgroups(root)
    config = PodResourceConfig(cpu_shares=1024, cpu_quota=50000, cpu_period=100000, memory=134217728)
    cgroups.ensure("/kubepods/podg-2", config)
    assert not (root / "kubepods" / "podg-2" / "pids.max").exists()  # podPidsLimit -1: none written
    # cpu.weight 39 reads back as 998 shares, as upstream's reader rounds.
    assert cgroups.read("/kubepods/podg-2") == PodResourceConfig(
        cpu_shares=998, cpu_quota=50000, cpu_period=100000, memory=134217728
    )
    cgroups.write("/kubepods/podg-2", PodResourceConfig(cpu_quota=-1, cpu_period=100000, memory=-1))
    assert (root / "kubepods" / "podg-2" / "cpu.max").read_text() == "max 100000"
    assert (root / "kubepods" / "podg-2" / "memory.max").read_text() == "max"


def test_v1_pids_limit_goes_to_the_pids_hierarchy(tmp_path: Path) -> None:
    root = v1_tree(tmp_path)
    CgroupfsPodCgroups(root, pod_pids_limit=512).ensure("/kubepods/besteffort/pode-2", PodResourceConfig(cpu_shares=2))
    assert (root / "cpu" / "kubepods/besteffort/pode-2" / "cpu.shares").read_text() == "2"
    assert (root / "pids" / "kubepods/besteffort/pode-2" / "pids.max").read_text() == "512"


@pytest.mark.parametrize("limit", [-1, 0])
def test_v1_without_a_pids_limit_leaves_the_pids_hierarchy_alone(tmp_path: Path, limit: int) -> None:
    root = v1_tree(tmp_path)
    CgroupfsPodCgroups(root, pod_pids_limit=limit).ensure(
        "/kubepods/besteffort/pode-3", PodResourceConfig(cpu_shares=2)
    )
    assert (root / "memory" / "kubepods/besteffort/pode-3").is_dir()
    assert not (root / "pids" / "kubepods").exists()
