"""PSI in /metrics/cadvisor (cAdvisor's PressureMetrics, which the kubelet registers with KubeletPSI): the six
container_pressure_*_seconds_total counters, "some" as waiting and "full" as stalled, in seconds, with cAdvisor's
names, help texts and the row's labels, for every row whose cgroup has the *.pressure files: over the recorded v2
tree in the systemd driver's layout (tests/unit/stats/test_psi.py), and none from the recorded v1 tree."""

from __future__ import annotations

import re
from pathlib import Path

from nodeagent.stats.cadvisor import CadvisorContainer, cadvisor_metrics
from nodeagent.stats.cgroups import CgroupFS
from tests.unit.stats.test_provider import DATA, Clock
from tests.unit.stats.test_psi import systemd_world

SLICE = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podv2.slice"
MAIN = f"{SLICE}/cri-containerd-c-main.scope"

# from test_psi's recorded files: cpu some 123456 us / full 789 us, memory 4 s / 3 s, io 42 us / 41 us
EXPECTED = {
    "container_pressure_cpu_waiting_seconds_total": 0.123456,
    "container_pressure_cpu_stalled_seconds_total": 0.000789,
    "container_pressure_memory_waiting_seconds_total": 4.0,
    "container_pressure_memory_stalled_seconds_total": 3.0,
    "container_pressure_io_waiting_seconds_total": 4.2e-05,
    "container_pressure_io_stalled_seconds_total": 4.1e-05,
}
LINE = re.compile(r"^(container_pressure_\w+)\{([^}]*)\} (\S+) (\d+)$")


def pressure_lines(text: str) -> dict[tuple[str, str], tuple[dict[str, str], float]]:
    """(metric, id) -> (labels, value) of every container_pressure sample."""
    found: dict[tuple[str, str], tuple[dict[str, str], float]] = {}
    for line in text.splitlines():
        match = LINE.match(line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
            found[match.group(1), labels["id"]] = (labels, float(match.group(3)))
    return found


async def test_v2_rows_carry_psi(tmp_path: Path) -> None:
    provider, _ = systemd_world(tmp_path)
    text = cadvisor_metrics(await provider.cadvisor_containers())
    found = pressure_lines(text)
    # the root, the pod's slice and the container's scope have pressure files; kubepods.slice and the pause
    # container's scope were recorded without them, so they have no samples
    assert {cgroup for _, cgroup in found} == {"/", SLICE, MAIN}
    for name, value in EXPECTED.items():
        for cgroup in ("/", SLICE, MAIN):
            assert found[name, cgroup][1] == value, (name, cgroup)
    labels, _ = found["container_pressure_memory_waiting_seconds_total", MAIN]
    assert labels == {
        "id": MAIN, "name": "c-main", "image": "reg/busybox:1", "pod": "web", "namespace": "default",
        "container": "main",
    }  # fmt: skip
    assert found["container_pressure_cpu_stalled_seconds_total", SLICE][0]["pod"] == "web"
    assert (
        "# HELP container_pressure_io_stalled_seconds_total Total time duration no tasks in the container could make "
        "progress due to IO congestion.\n# TYPE container_pressure_io_stalled_seconds_total counter\n"
    ) in text
    assert (
        "# HELP container_pressure_cpu_waiting_seconds_total Total time duration tasks in the container have waited "
        "due to CPU congestion.\n"
    ) in text
    assert "due to memory congestion." in text


def test_v1_rows_carry_none() -> None:
    fs = CgroupFS(DATA.parent / "cgroupv1")
    root = fs.read("/", now=Clock().now)
    assert root is not None
    text = cadvisor_metrics([CadvisorContainer.from_cgroup(root)])
    assert "container_cpu_usage_seconds_total" in text
    assert "container_pressure" not in text
