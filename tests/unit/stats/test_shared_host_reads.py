"""The host-wide reads an emulated node's stats provider shares with the other nodes of its process
(`SharedHostReads`): read once for all within their max age, and still the source of an emulated node's memory
signal, so that its eviction manager reports MemoryPressure and evicts its fake pod when the memory crosses the
threshold."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil

from cri.fake import FakeCRI
from cri.fake import behaviour as behaviours
from cri.v1 import api_pb2
from eviction.result import Eviction
from nodeagent.config import KubeletConfiguration
from nodeagent.evictionmanager import EvictionInputs, EvictionManager, eviction_config
from nodeagent.stats.cgroups import CgroupFS
from nodeagent.stats.provider import SharedHostReads, StatsProvider
from tests.unit.fakeclock import FakeClock

DATA = Path(__file__).parent / "testdata" / "cgroupv2"
GI = 1 << 30
IMAGE = "registry.test/busybox:1.35"


class Monotonic:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _cgroups(tmp_path: Path) -> Path:
    root = tmp_path / "cgroup"
    shutil.copytree(DATA, root)
    return root


def _set_anon(cgroups: Path, anon: int) -> None:
    """The root cgroup's anonymous memory (its usage is anon + file, its working set that less inactive_file)."""
    stat = cgroups / "memory.stat"
    lines = [f"anon {anon}" if line.startswith("anon ") else line for line in stat.read_text().splitlines()]
    stat.write_text("\n".join(lines) + "\n")


def _provider(fake: FakeCRI, tmp_path: Path, name: str, cgroups: Path, shared: SharedHostReads) -> StatsProvider:
    root_dir = tmp_path / name
    root_dir.mkdir()
    return StatsProvider(
        fake.runtime,
        fake.image,
        node_name=name,
        root_dir=str(root_dir),
        pod_log_dir_root=str(root_dir / "pod-logs"),
        cgroupfs=CgroupFS(cgroups),
        shared_host_reads=shared,
    )


async def test_the_nodes_of_a_process_read_the_host_once_within_the_max_age(tmp_path: Path) -> None:
    cgroups = _cgroups(tmp_path)
    clock = Monotonic()
    shared = SharedHostReads(max_age=1.0, monotonic=clock)
    providers = [_provider(FakeCRI(f"n{i}"), tmp_path, f"n{i}", cgroups, shared) for i in range(3)]
    first = [await p.summary() for p in providers]
    assert shared.reads == 1
    # each node still has its own name and its own root dir's filesystem, and the same host memory
    assert [s.node.node_name for s in first] == ["n0", "n1", "n2"]
    assert all(s.node.fs is not None for s in first)
    assert {s.node.memory.working_set_bytes for s in first if s.node.memory is not None} == {2 * GI}
    # a change of the host within the max age is not seen; after it, by the next summary of any node
    _set_anon(cgroups, 3 * GI)
    clock.now += 0.5
    within = [(await p.summary()).node.memory for p in providers]
    assert [m.working_set_bytes if m is not None else None for m in within] == [2 * GI] * 3
    assert shared.reads == 1
    clock.now += 0.6
    later = await providers[2].summary()
    assert later.node.memory is not None and later.node.memory.working_set_bytes == 4 * GI
    assert shared.reads == 2


async def test_a_provider_without_shared_reads_reads_the_host_every_summary(tmp_path: Path) -> None:
    cgroups = _cgroups(tmp_path)
    fake = FakeCRI("real")
    provider = StatsProvider(
        fake.runtime, fake.image, node_name="real", root_dir=str(tmp_path), cgroupfs=CgroupFS(cgroups)
    )
    before = await provider.summary()
    _set_anon(cgroups, 3 * GI)
    after = await provider.summary()
    assert before.node.memory is not None and before.node.memory.working_set_bytes == 2 * GI
    assert after.node.memory is not None and after.node.memory.working_set_bytes == 4 * GI


async def _run_fake_pod(fake: FakeCRI, memory_bytes: int) -> str:
    """A running one-container pod on the fake runtime using `memory_bytes`; its UID."""
    uid = "uid-hog"
    config = api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name="hog", namespace="default", uid=uid, attempt=0),
        annotations={behaviours.MEMORY_BYTES: str(memory_bytes)},
    )
    await fake.image.pull_image(api_pb2.ImageSpec(image=IMAGE))
    sandbox = await fake.runtime.run_pod_sandbox(config)
    container = api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name="main", attempt=0),
        image=api_pb2.ImageSpec(image=IMAGE),
        command=["sleep", "3600"],
    )
    cid = await fake.runtime.create_container(sandbox, container, config)
    await fake.runtime.start_container(cid)
    return uid


async def test_an_emulated_node_under_memory_pressure_reports_it_and_evicts_its_fake_pod(tmp_path: Path) -> None:
    cgroups = _cgroups(tmp_path)
    clock = Monotonic()
    shared = SharedHostReads(max_age=1.0, monotonic=clock)
    fake = FakeCRI("n0")
    provider = _provider(fake, tmp_path, "n0", cgroups, shared)
    uid = await _run_fake_pod(fake, 512 << 20)
    pod: dict[str, Any] = {
        "metadata": {"uid": uid, "name": "hog", "namespace": "default"},
        "spec": {"containers": [{"name": "main"}]},
    }
    evicted: list[tuple[str, Eviction]] = []
    inputs = EvictionInputs(
        summary=provider.summary,
        active_pods=lambda: [pod],
        evict=lambda p, e: evicted.append((p["metadata"]["name"], e)),
    )
    # the threshold between the host's available memory now (capacity - 2Gi) and after 1Gi more (capacity - 3Gi)
    threshold = psutil.virtual_memory().total - 5 * GI // 2
    config = replace(KubeletConfiguration(), eviction_hard={"memory.available": str(threshold)})
    manager = EvictionManager(eviction_config(config), clock=FakeClock())
    await manager.synchronize(inputs)
    assert manager.pressure_conditions() == frozenset() and evicted == []
    _set_anon(cgroups, 2 * GI)
    clock.now += 1.0
    await manager.synchronize(inputs)
    assert manager.pressure_conditions() == frozenset({"MemoryPressure"})
    [(name, eviction)] = evicted
    assert name == "hog"
    assert "Container main was using 512Mi" in eviction.message
