"""cgroupfs readings: the parsers and arithmetic in tables, and CgroupFS on recorded trees (v1 copied from this
project's testbed machine; v2 in the kernel's v2 file formats, root without memory.current as the kernel has it)."""

from __future__ import annotations

import datetime
import errno
from pathlib import Path

import pytest

from nodeagent.stats import cgroups
from nodeagent.stats.cgroups import (
    CgroupFS,
    MemorySample,
    memory_v1,
    memory_v2,
    parse_flat_keyed,
    parse_limit,
    parse_proc_cgroup,
    process_cgroup,
)

DATA = Path(__file__).parent / "testdata"
NOW = datetime.datetime(2026, 11, 25, 10, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("max\n", None),
        ("9223372036854771712\n", None),  # v1's unlimited
        (str((1 << 62) + 1), None),
        (str(1 << 62), 1 << 62),
        ("134217728\n", 134217728),
        ("", None),
    ],
)
def test_parse_limit(text: str, expected: int | None) -> None:
    assert parse_limit(text) == expected


def test_parse_flat_keyed_skips_what_does_not_parse() -> None:
    assert parse_flat_keyed("a 1\nb x\nc 3 4\n\nd 5\n") == {"a": 1, "d": 5}


@pytest.mark.parametrize(
    ("usage", "limit", "stat", "expected"),
    [
        pytest.param(
            1000,
            None,
            {"total_inactive_file": 300, "total_rss": 200, "rss": 1, "pgfault": 7, "pgmajfault": 2},
            MemorySample(1000, 700, 200, 7, 2, None),
            id="working-set-minus-inactive-file",
        ),
        pytest.param(
            100, 400, {"total_inactive_file": 300}, MemorySample(100, 0, 0, None, None, 400), id="never-below-zero"
        ),
        pytest.param(100, None, {"rss": 50}, MemorySample(100, 100, 50, None, None, None), id="no-hierarchy-keys"),
    ],
)
def test_memory_v1(usage: int, limit: int | None, stat: dict[str, int], expected: MemorySample) -> None:
    assert memory_v1(usage, limit, stat) == expected


@pytest.mark.parametrize(
    ("current", "limit", "stat", "expected"),
    [
        pytest.param(
            1000,
            4000,
            {"anon": 600, "file": 400, "inactive_file": 250, "pgfault": 9, "pgmajfault": 1},
            MemorySample(1000, 750, 600, 9, 1, 4000),
            id="child",
        ),
        pytest.param(
            None,
            None,
            {"anon": 600, "file": 400, "inactive_file": 250},
            MemorySample(1000, 750, 600, None, None, None),
            id="root-anon-plus-file",
        ),
    ],
)
def test_memory_v2(current: int | None, limit: int | None, stat: dict[str, int], expected: MemorySample) -> None:
    assert memory_v2(current, limit, stat) == expected


@pytest.mark.parametrize(
    ("limit", "working_set", "available"),
    [(None, 10, None), (100, 30, 70), (100, 130, 0)],
)
def test_available_bytes(limit: int | None, working_set: int, available: int | None) -> None:
    assert MemorySample(0, working_set, 0, None, None, limit).available_bytes == available


@pytest.mark.parametrize(
    ("text", "unified", "expected"),
    [
        pytest.param("0::/kubelet.slice\n", True, "/kubelet.slice", id="v2"),
        pytest.param("4:memory:/agent\n2:cpu,cpuacct:/agent\n1:name=systemd:/x\n", False, "/agent", id="v1-unified"),
        pytest.param("4:memory:/process_api/a0\n2:cpuacct:/\n1:cpu:/\n0::/\n", False, None, id="v1-cpu-memory-differ"),
        pytest.param("4:memory:/a\n", False, None, id="v1-no-cpu"),
    ],
)
def test_process_cgroup(text: str, unified: bool, expected: str | None) -> None:
    assert process_cgroup(parse_proc_cgroup(text), unified=unified) == expected


def test_v1_recorded_root_and_container() -> None:
    fs = CgroupFS(DATA / "cgroupv1")
    assert not fs.unified
    root = fs.read("/", now=NOW, memory_limit=24 << 30)
    assert root is not None and root.memory is not None
    assert root.cpu_usage_ns == 2391283645265
    assert root.memory.usage_bytes == 2589990912
    assert root.memory.working_set_bytes == 2589990912 - 391532544
    assert root.memory.rss_bytes == 1332297728
    assert (root.memory.page_faults, root.memory.major_page_faults) == (117620, 0)
    assert root.memory.available_bytes == (24 << 30) - root.memory.working_set_bytes  # the machine's memory
    burner = fs.read("/kubepods/besteffort/podrecorded/burner", now=NOW)
    assert burner is not None and burner.memory is not None
    assert burner.memory == MemorySample(67481600, 67481600, 57344, 1150, 0, None)
    assert burner.start_time is not None and burner.time == NOW
    assert fs.read("/kubepods/besteffort/podgone", now=NOW) is None


def test_v2_recorded_root_pod_and_container() -> None:
    fs = CgroupFS(DATA / "cgroupv2")
    assert fs.unified
    root = fs.read("/", now=NOW, memory_limit=16 << 30)
    assert root is not None and root.memory is not None
    assert root.cpu_usage_ns == 98765432101 * 1000
    assert root.memory.usage_bytes == 1073741824 + 2147483648  # no memory.current at the root
    assert root.memory.working_set_bytes == 1073741824 + 2147483648 - 1073741824
    assert root.memory.rss_bytes == 1073741824
    assert (root.memory.page_faults, root.memory.major_page_faults) == (55555555, 4444)
    ctr = fs.read("/kubepods/burstable/podv2/ctr", now=NOW)
    assert ctr is not None and ctr.memory is not None
    assert ctr.cpu_usage_ns == 1_500_000_000
    assert ctr.memory == MemorySample(73400320, 73400320 - 8388608, 62914560, 17000, 12, 134217728)
    assert ctr.memory.available_bytes == 134217728 - (73400320 - 8388608)
    pod = fs.read("/kubepods/burstable/podv2", now=NOW)
    assert pod is not None and pod.memory is not None
    assert pod.memory.limit_bytes is None and pod.memory.available_bytes is None  # memory.max "max"
    assert pod.memory.usage_bytes == 80000000


def test_v2_missing_files_give_no_values(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    (tmp_path / "empty").mkdir()
    sample = CgroupFS(tmp_path).read("/empty", now=NOW)
    assert sample is not None
    assert sample.cpu_usage_ns is None and sample.memory is None


def test_a_cgroup_being_removed_reads_as_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    # A pod deleted during a /stats/summary: its cgroup directory is still listed, its files fail with ENODEV. That
    # was a 500 on /stats/summary and /metrics/cadvisor under load (11 of 30,000 requests); it is a cgroup gone.
    def enodev(path: str, *args: object, **kwargs: object) -> None:
        raise OSError(errno.ENODEV, "No such device", path)

    monkeypatch.setattr("builtins.open", enodev)
    assert cgroups._read("/sys/fs/cgroup/memory/kubepods/podx/memory.usage_in_bytes") is None

    def eio(path: str, *args: object, **kwargs: object) -> None:
        raise OSError(errno.EIO, "Input/output error", path)

    monkeypatch.setattr("builtins.open", eio)
    with pytest.raises(OSError):
        cgroups._read("/sys/fs/cgroup/memory/kubepods/podx/memory.usage_in_bytes")
