"""The node's own numbers: statvfs arithmetic, rlimit, the interfaces cAdvisor counts, `du`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodeagent.stats.host import (
    DiskUsage,
    FsInfo,
    InterfaceCounters,
    Rlimit,
    device_for,
    disk_usage,
    files_usage,
    fs_info,
    node_interfaces,
    parse_net_dev,
    rlimit_from,
)


def test_fs_info_is_cadvisors() -> None:
    info = fs_info(frsize=4096, blocks=1000, bfree=300, bavail=250, files=500, ffree=200)
    assert info == FsInfo(capacity=4096000, available=1024000, usage=2867200, inodes=500, inodes_free=200)
    assert info.inodes_used == 300
    no_inodes = fs_info(frsize=4096, blocks=10, bfree=5, bavail=5, files=0, ffree=0)
    assert no_inodes.inodes is None and no_inodes.inodes_used is None


@pytest.mark.parametrize(
    ("pid_max", "threads_max", "loadavg", "expected"),
    [
        ("4194304\n", "189976\n", "0.52 0.58 0.59 3/389 12345\n", Rlimit(189976, 389)),
        ("32768\n", "189976\n", "0.00 0.01 0.05 1/72 99\n", Rlimit(32768, 72)),
        (None, "1000\n", "garbage", Rlimit(1000, None)),
        (None, None, None, Rlimit(None, None)),
    ],
)
def test_rlimit_from(pid_max: str | None, threads_max: str | None, loadavg: str | None, expected: Rlimit) -> None:
    assert rlimit_from(pid_max, threads_max, loadavg) == expected


def test_node_interfaces_leave_out_what_cadvisor_ignores() -> None:
    names = ["lo", "eth0", "veth1234", "docker0", "nerdctl0", "br-x", "ens3", "Veth9"]
    counters = {n: InterfaceCounters(n, 1, 0, 2, 0) for n in names}
    assert [c.name for c in node_interfaces(counters)] == ["br-x", "ens3", "eth0"]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/var/lib/kubelet", "/dev/vdb"),
        ("/var/lib", "/dev/vda"),
        ("/var/lib/kubeletx", "/dev/vda"),
        ("/home", "/dev/vda"),
        ("/var/lib/kubelet/pods/x", "/dev/vdb"),
    ],
)
def test_device_for_takes_the_longest_mountpoint(path: str, expected: str) -> None:
    mounts = [("/dev/vda", "/"), ("proc", "/proc"), ("/dev/vdb", "/var/lib/kubelet")]
    assert device_for(path, mounts) == expected


def test_disk_usage_counts_blocks_and_inodes_once(tmp_path: Path) -> None:
    top = tmp_path / "vol"
    (top / "sub").mkdir(parents=True)
    (top / "a").write_bytes(b"x" * 10000)
    (top / "sub" / "b").write_bytes(b"y" * 5000)
    os.link(top / "a", top / "hard")  # the same inode: counted once
    (top / "link").symlink_to(top / "a")
    expected_bytes = sum(os.lstat(p).st_blocks * 512 for p in (top, top / "sub", top / "a", top / "sub" / "b"))
    expected_bytes += os.lstat(top / "link").st_blocks * 512
    assert disk_usage(str(top)) == DiskUsage(expected_bytes, 5)
    assert disk_usage(str(tmp_path / "missing")) == DiskUsage(0, 0)
    single = disk_usage(str(top / "a"))
    assert single.inodes_used == 1 and single.used_bytes >= 10000


def test_files_usage_counts_only_the_files_in_the_directory(tmp_path: Path) -> None:
    (tmp_path / "0.log").write_bytes(b"l" * 100)
    (tmp_path / "1.log.gz").write_bytes(b"z" * 100)
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "x").write_bytes(b"x" * 100000)
    found = files_usage(str(tmp_path))
    assert found is not None and found.inodes_used == 2
    assert found.used_bytes == sum(os.lstat(tmp_path / n).st_blocks * 512 for n in ("0.log", "1.log.gz"))
    assert files_usage(str(tmp_path / "missing")) is None


def test_parse_net_dev() -> None:
    assert parse_net_dev((Path(__file__).parent / "testdata" / "net-dev").read_text()) == {
        "lo": InterfaceCounters("lo", 1000, 0, 1000, 0),
        "eth0": InterfaceCounters("eth0", 2372, 1, 936, 2),
    }
    assert parse_net_dev("header\nheader\nbroken: 1 2\n") == {}
