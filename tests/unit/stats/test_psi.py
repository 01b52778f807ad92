"""PSI in the Summary (KubeletPSI, beta and on by default in v1.34) and the systemd driver's container scopes: the
*.pressure parser in a table, its JSON as upstream's PSIStats/PSIData/IOStats, and StatsProvider over a cgroup v2
tree in the systemd driver's layout (kubepods.slice/...; containerd's cri-containerd-<id>.scope per container), where
the pod's network (the pause scope's namespace), its process count and the containers' PSI must be found."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest

from nodeagent.stats import cgroups
from nodeagent.stats.cgroups import CgroupFS, parse_pressure
from nodeagent.stats.provider import StatsProvider
from nodeagent.stats.types import PSIData, PSIStats, summary_json
from tests.unit.stats.test_provider import DATA, Clock, Runtime

CPU_PRESSURE = "some avg10=1.50 avg60=0.25 avg300=0.00 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=789\n"
MEMORY_PRESSURE = (
    "some avg10=12.34 avg60=5.00 avg300=1.00 total=4000000\nfull avg10=10.00 avg60=4.00 avg300=0.50 total=3000000\n"
)
IO_PRESSURE = "some avg10=0.00 avg60=0.00 avg300=0.00 total=42\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=41\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            CPU_PRESSURE,
            PSIStats(full=PSIData(789, 0.0, 0.0, 0.0), some=PSIData(123456, 1.5, 0.25, 0.0)),
            id="cpu-with-full",
        ),
        # Before Linux 5.13 cpu.pressure has no "full" line: zeros, as cAdvisor leaves it.
        pytest.param(
            "some avg10=0.10 avg60=0.20 avg300=0.30 total=5\n",
            PSIStats(full=PSIData(), some=PSIData(5, 0.1, 0.2, 0.3)),
            id="no-full-line",
        ),
        pytest.param("", None, id="empty"),
        pytest.param("some avg10=x avg60=0 avg300=0 total=1\n", None, id="garbage"),
    ],
)
def test_parse_pressure(text: str, expected: PSIStats | None) -> None:
    assert parse_pressure(text) == expected


def test_pressure_is_none_on_v1_and_where_reads_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert CgroupFS(DATA.parent / "cgroupv1").pressure("/", "cpu") is None
    (tmp_path / "cgroup.controllers").write_text("cpu memory io\n")
    (tmp_path / "cpu.pressure").write_text(CPU_PRESSURE)
    fs = CgroupFS(tmp_path)
    assert fs.pressure("/", "memory") is None  # no file
    assert fs.pressure("/", "cpu") == parse_pressure(CPU_PRESSURE)

    def refused(path: str) -> str:
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(cgroups, "_read", refused)  # a kernel booted with psi=0
    assert fs.pressure("/", "cpu") is None


def systemd_world(tmp_path: Path) -> tuple[StatsProvider, Path]:
    """The provider's recorded v2 tree moved into the systemd driver's layout, with pressure files."""
    cgroup = tmp_path / "cgroup"
    shutil.copytree(DATA, cgroup, ignore=shutil.ignore_patterns("kubepods"))
    pod = cgroup / "kubepods.slice" / "kubepods-burstable.slice" / "kubepods-burstable-podv2.slice"
    shutil.copytree(DATA / "kubepods" / "burstable" / "podv2", pod, ignore=shutil.ignore_patterns("ctr"))
    for scope, procs in (("cri-containerd-ctr.scope", "4242\n"), ("cri-containerd-c-main.scope", "4243\n4244\n")):
        (pod / scope).mkdir()
        (pod / scope / "cgroup.procs").write_text(procs)
    for directory in (cgroup, pod, pod / "cri-containerd-c-main.scope"):
        (directory / "cpu.pressure").write_text(CPU_PRESSURE)
        (directory / "memory.pressure").write_text(MEMORY_PRESSURE)
        (directory / "io.pressure").write_text(IO_PRESSURE)
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("0::/system.slice/nodeagent.service\n")
    (proc / "4242" / "net").mkdir(parents=True)
    shutil.copy(DATA.parent / "net-dev", proc / "4242" / "net" / "dev")
    (proc / "sys" / "kernel").mkdir(parents=True)
    (proc / "sys" / "kernel" / "pid_max").write_text("4194304\n")
    (proc / "sys" / "kernel" / "threads-max").write_text("95000\n")
    (proc / "loadavg").write_text("0.10 0.20 0.30 2/345 6789\n")
    snapshot = tmp_path / "snapshots"
    snapshot.mkdir()
    runtime, clock = Runtime(str(snapshot)), Clock()
    provider = StatsProvider(
        runtime,
        runtime,
        node_name="node-1",
        root_dir=str(tmp_path / "kubelet"),
        pod_log_dir_root=str(tmp_path / "pods"),
        cgroupfs=CgroupFS(cgroup),
        cgroup_driver="systemd",
        proc=proc,
        wall=lambda: clock.now,
        monotonic=lambda: clock.mono,
    )
    return provider, pod


async def test_summary_psi_and_scopes_under_the_systemd_driver(tmp_path: Path) -> None:
    provider, _ = systemd_world(tmp_path)
    found = await provider.summary()
    cpu, memory, io = parse_pressure(CPU_PRESSURE), parse_pressure(MEMORY_PRESSURE), parse_pressure(IO_PRESSURE)
    [pod] = found.pods
    assert pod.pod_ref.uid == "v2"
    # the pause container's scope holds the network namespace; the container's scope its processes
    assert pod.network is not None and pod.network.default is not None and pod.network.default.rx_bytes == 2372
    assert pod.process_stats is not None and pod.process_stats.process_count == 2
    assert pod.cpu is not None and pod.cpu.psi == cpu
    assert pod.memory is not None and pod.memory.psi == memory
    assert pod.io is not None and pod.io.psi == io
    [main] = pod.containers
    assert main.cpu is not None and main.cpu.psi == cpu
    assert main.memory is not None and main.memory.psi == memory
    assert main.io is None  # containerd 1.7's CRI stats carry no io; cAdvisor's container io is not taken
    node = found.node
    assert node.cpu is not None and node.cpu.psi == cpu
    assert node.memory is not None and node.memory.psi == memory
    assert node.io is not None and node.io.psi == io

    body = summary_json(found)
    # upstream's NodeStats order (Go marshals in declaration order): io between memory and network
    order = ["nodeName", "systemContainers", "startTime", "cpu", "memory", "io", "network", "fs", "runtime", "rlimit"]
    assert [k for k in body["node"] if k in order] == [k for k in order if k in body["node"]]
    assert {"cpu", "memory", "io", "network"} <= set(body["node"])
    assert body["node"]["memory"]["psi"] == {
        "full": {"total": 3000000, "avg10": 10, "avg60": 4, "avg300": 0.5},
        "some": {"total": 4000000, "avg10": 12.34, "avg60": 5, "avg300": 1},
    }
    assert list(body["node"]["io"]) == ["time", "psi"]
    assert list(body["node"]["cpu"])[-1] == "psi"
    pod_body = body["pods"][0]
    assert list(pod_body)[:6] == ["podRef", "startTime", "containers", "cpu", "memory", "io"]
    assert pod_body["containers"][0]["cpu"]["psi"]["some"]["total"] == 123456

    only = await provider.summary(only_cpu_and_memory=True)
    [pod] = only.pods
    assert pod.io is None and pod.cpu is not None and pod.cpu.psi == cpu
    assert only.node.io is None and only.node.memory is not None and only.node.memory.psi == memory


async def test_v1_summary_has_no_psi() -> None:
    # The recorded v1 tree has no pressure files: no psi, no io, as before (upstream writes zeros there).
    fs = CgroupFS(DATA.parent / "cgroupv1")
    root = fs.read("/", now=Clock().now)
    assert root is not None and (root.cpu_psi, root.memory_psi, root.io_psi) == (None, None, None)
