"""Whether a fleet fits the machine: the estimate, the refusals with their figures, the CPU warning, and the limits
read from /proc and the memory cgroup (files written here in their kernel formats)."""

from __future__ import annotations

import logging
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent import cli
from nodeagent.fleet import capacity, command
from nodeagent.fleet.capacity import (
    BASE_FDS,
    BASE_MEMORY,
    KUBELET_API_FDS,
    NODE_FDS,
    NODE_MEMORY,
    POD_MEMORY,
    HostLimits,
    check_capacity,
    estimate,
    raise_nofile,
    read_host_limits,
)
from nodeagent.fleet.plan import FleetError, FleetOptions

GiB = 1 << 30
MiB = 1 << 20
# This machine's kind: 24 GB, RLIMIT_NOFILE 20,000, 2 cores.
BIG = HostLimits(
    memory_available=22 * GiB, memory_source="MemAvailable", resident=100 * MiB, nofile=20_000, nofile_hard=20_000,
    cpus=2,
)  # fmt: skip


def options(nodes: int, **changes: object) -> FleetOptions:
    return FleetOptions(nodes=nodes, prefix="h", directory=Path("/fleet"), kubeconfig=Path("/k"), **changes)  # type: ignore[arg-type]


def limits(**changes: object) -> HostLimits:
    return HostLimits(**{**BIG.__dict__, **changes})


def test_the_estimate_counts_every_node_full() -> None:
    assert estimate(10, 30, kubelet_api=False).memory == BASE_MEMORY + 10 * (NODE_MEMORY + 30 * POD_MEMORY)
    assert estimate(10, 30, kubelet_api=False).fds == BASE_FDS + 10 * NODE_FDS
    assert estimate(10, 30, kubelet_api=True).fds == BASE_FDS + 10 * (NODE_FDS + KUBELET_API_FDS)
    assert estimate(10, 110, kubelet_api=False).memory > estimate(10, 30, kubelet_api=False).memory


def test_the_issues_fleet_fits_this_kind_of_machine() -> None:
    # 1,000 nodes of 30 pods with the kubelet API: the issue's goal, on 2 cores and 24 GB.
    assert check_capacity(options(1000, kubelet_port=10350), BIG) == []
    # As many as the default address ranges hold: more than 500 a core warns, and starts.
    (warning,) = check_capacity(options(1024, kubelet_port=10350), BIG)
    assert "nodes_per_cpu=512" in warning


def test_too_many_nodes_for_the_memory_are_refused_with_the_figures() -> None:
    small = limits(memory_available=512 * MiB, memory_source="MemAvailable in /proc/meminfo")
    fits = (512 * MiB + min(BIG.resident, BASE_MEMORY) - BASE_MEMORY) // (NODE_MEMORY + 30 * POD_MEMORY)
    assert check_capacity(options(fits), small) == []
    with pytest.raises(FleetError) as refused:
        check_capacity(options(fits + 1), small)
    message = str(refused.value)
    assert f"--nodes {fits + 1} does not fit in memory" in message
    assert "512 MiB is available (MemAvailable in /proc/meminfo)" in message
    assert "2.5 MiB per node" in message and "per pod at --max-pods 30" in message
    # Fewer pods per node, more nodes in the same memory.
    assert check_capacity(options(fits + 1, max_pods=10), small) == []


def test_too_many_nodes_for_the_descriptors_are_refused_with_the_figures() -> None:
    tight = limits(nofile=1024, nofile_hard=4096)
    fits = (1024 - BASE_FDS) // NODE_FDS
    assert check_capacity(options(fits), tight) == []
    with pytest.raises(FleetError) as refused:
        check_capacity(options(fits + 1), tight)
    message = str(refused.value)
    assert f"about {BASE_FDS + (fits + 1) * NODE_FDS:,} are needed" in message
    assert "RLIMIT_NOFILE is 1,024 (hard limit 4,096)" in message
    # The kubelet API's listener and connections count too.
    with_api = (1024 - BASE_FDS) // (NODE_FDS + KUBELET_API_FDS)
    with pytest.raises(FleetError, match="and its kubelet API"):
        check_capacity(options(with_api + 1, kubelet_port=10350), tight)


def test_more_nodes_per_core_than_the_goal_warn_and_start() -> None:
    assert check_capacity(options(1000), limits(cpus=2)) == []
    (warning,) = check_capacity(options(1001), limits(cpus=2))
    assert "nodes_per_cpu=500" in warning and "lease renewals may come late" in warning
    assert check_capacity(options(600), limits(cpus=1)) != []


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    write(root / "meminfo", "MemTotal:       24576000 kB\nMemFree:         1000000 kB\nMemAvailable:    8388608 kB\n")
    write(root / "self" / "statm", "60000 25600 3000 1 0 40000 0\n")
    return root


def test_limits_from_meminfo_without_a_cgroup_limit(proc: Path, tmp_path: Path) -> None:
    cgroup = tmp_path / "cgroup"
    write(proc / "self" / "cgroup", "4:memory:/a/b\n0::/\n")
    write(cgroup / "memory" / "memory.limit_in_bytes", "9223372036854771712\n")  # v1's "no limit"
    write(cgroup / "memory" / "memory.usage_in_bytes", "1000\n")
    write(cgroup / "memory" / "a" / "b" / "memory.limit_in_bytes", "9223372036854771712\n")
    write(cgroup / "memory" / "a" / "b" / "memory.usage_in_bytes", "1000\n")
    found = read_host_limits(proc=proc, cgroup_root=cgroup, nofile=(1024, 4096))
    assert found.memory_available == 8 * GiB
    assert found.memory_source == "MemAvailable in /proc/meminfo"
    assert found.resident == 25600 * 4096
    assert (found.nofile, found.nofile_hard) == (1024, 4096)


def test_a_cgroup_v1_ancestors_limit_applies(proc: Path, tmp_path: Path) -> None:
    cgroup = tmp_path / "cgroup"
    write(proc / "self" / "cgroup", "9:name=systemd:/\n4:memory:/pods/shard-0\n1:cpu:/\n")
    write(cgroup / "memory" / "pods" / "memory.limit_in_bytes", str(1 * GiB))
    write(cgroup / "memory" / "pods" / "memory.usage_in_bytes", str(700 * MiB))
    write(cgroup / "memory" / "pods" / "shard-0" / "memory.limit_in_bytes", str(2 * GiB))
    write(cgroup / "memory" / "pods" / "shard-0" / "memory.usage_in_bytes", str(600 * MiB))
    found = read_host_limits(proc=proc, cgroup_root=cgroup, nofile=(1024, 1024))
    assert found.memory_available == 324 * MiB
    assert found.memory_source == "the memory cgroup /pods: limit 1,024 MiB, used 700 MiB"


def test_a_cgroup_v2_limit_in_its_own_namespace(proc: Path, tmp_path: Path) -> None:
    cgroup = tmp_path / "cgroup"
    write(proc / "self" / "cgroup", "0::/\n")
    write(cgroup / "cgroup.controllers", "cpu memory pids\n")
    write(cgroup / "memory.max", str(512 * MiB))
    write(cgroup / "memory.current", str(112 * MiB))
    found = read_host_limits(proc=proc, cgroup_root=cgroup, nofile=(1024, 1024))
    assert found.memory_available == 400 * MiB
    assert "limit 512 MiB, used 112 MiB" in found.memory_source
    write(cgroup / "memory.max", "max\n")
    assert read_host_limits(proc=proc, cgroup_root=cgroup, nofile=(1024, 1024)).memory_available == 8 * GiB


@pytest.fixture
def nofile() -> Iterator[tuple[int, int]]:
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield before
    resource.setrlimit(resource.RLIMIT_NOFILE, before)


def test_the_soft_descriptor_limit_is_raised_to_the_hard_one(nofile: tuple[int, int]) -> None:
    hard = nofile[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    soft, now_hard = raise_nofile()
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    assert soft == now_hard


def test_the_command_refuses_before_any_node_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], nofile: tuple[int, int], tmp_path: Path
) -> None:
    monkeypatch.setattr(command, "read_host_limits", lambda: limits(memory_available=256 * MiB))
    code = cli.main(["fleet", "--nodes", "200", "--kubeconfig", "/nonexistent", "--dir", str(tmp_path)])
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("nodeagent: --nodes 200 does not fit in memory")
    assert "256 MiB is available" in err
    assert not (tmp_path / "nodes").exists()


def test_no_capacity_check_logs_the_problem_and_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, nofile: tuple[int, int]
) -> None:
    monkeypatch.setattr(command, "read_host_limits", lambda: limits(memory_available=256 * MiB))
    with caplog.at_level(logging.INFO, logger="nodeagent.fleet"):
        command._check_capacity(options(200), enforce=False)
    assert "starting anyway (--no-capacity-check)" in caplog.text
    assert "memory_available=256MiB" in caplog.text
    with pytest.raises(FleetError):
        command._check_capacity(options(200), enforce=True)


def test_this_machine_is_read() -> None:
    found = read_host_limits(nofile=(1, 1))
    assert found.memory_available > 0 and found.cpus >= 1 and capacity.MiB == MiB
