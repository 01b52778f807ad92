"""/metrics/cadvisor, the subset this node serves: what cAdvisor's Prometheus collector writes for the kubelet about
CPU time, working set, filesystem usage and network bytes (cadvisor metrics/prometheus.go), with the kubelet's
labels (containerPrometheusLabelsFunc): `id` the cgroup, `name` the runtime's container ID, `image`, `pod`,
`namespace`, `container`, plus `cpu="total"`, `device` or `interface` where cAdvisor adds them.

PSI (KubeletPSI, beta and on by default in v1.34; cAdvisor's PressureMetrics): container_pressure_{cpu,memory,io}_
{waiting,stalled}_seconds_total, the "some" and "full" totals of the row's cgroup's *.pressure files in seconds, with
the same labels. Only where the files are (cgroup v2 with PSI): v1.34 as released registers PressureMetrics whenever
the gate is on and so writes zeros on cgroup v1 (kubernetes#136333); upstream's fix (kubernetes#137326) writes them
only where /sys/fs/cgroup/cpu.pressure exists, which is what this does, row by row.

Rows are the cgroups cAdvisor would watch for the kubelet: "/" (the node, with its filesystems and interfaces), the
pods' cgroup, each pod's cgroup, its pause container (which carries the pod's network, as cAdvisor reports network
only for the sandbox), and each container. Unlike cAdvisor on containerd, which measures no filesystem for
containers, a container's row has its writable layer's usage.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from nodeagent.stats.cgroups import CgroupSample
from nodeagent.stats.exposition import Family, Sample, render
from nodeagent.stats.types import PSIStats

NANOS = 1e9
MICROS = 1e6
# cAdvisor's: (resource, the word in its help text)
PRESSURE_RESOURCES = (("cpu", "CPU"), ("memory", "memory"), ("io", "IO"))


@dataclass(frozen=True, slots=True)
class NetworkCounters:
    interface: str
    rx_bytes: int
    tx_bytes: int


@dataclass(frozen=True, slots=True)
class CadvisorContainer:
    id: str
    name: str = ""
    image: str = ""
    pod: str = ""
    namespace: str = ""
    container: str = ""
    time: datetime.datetime | None = None
    start_time: datetime.datetime | None = None
    cpu_usage_ns: int | None = None
    working_set_bytes: int | None = None
    fs: tuple[tuple[str, int], ...] = ()  # (device, bytes used)
    network: tuple[NetworkCounters, ...] = ()
    cpu_psi: PSIStats | None = None
    memory_psi: PSIStats | None = None
    io_psi: PSIStats | None = None

    def pressure(self, resource: str) -> PSIStats | None:
        return {"cpu": self.cpu_psi, "memory": self.memory_psi, "io": self.io_psi}[resource]

    @staticmethod
    def from_cgroup(
        sample: CgroupSample,
        *,
        name: str = "",
        pod: str = "",
        namespace: str = "",
        fs: tuple[tuple[str, int], ...] = (),
        network: tuple[NetworkCounters, ...] = (),
    ) -> CadvisorContainer:
        return CadvisorContainer(
            id=sample.path,
            name=name,
            pod=pod,
            namespace=namespace,
            time=sample.time,
            start_time=sample.start_time,
            cpu_usage_ns=sample.cpu_usage_ns,
            working_set_bytes=sample.memory.working_set_bytes if sample.memory is not None else None,
            fs=fs,
            network=network,
            cpu_psi=sample.cpu_psi,
            memory_psi=sample.memory_psi,
            io_psi=sample.io_psi,
        )

    def labels(self) -> dict[str, str]:
        return {
            "id": self.id,
            "name": self.name,
            "image": self.image,
            "pod": self.pod,
            "namespace": self.namespace,
            "container": self.container,
        }


def cadvisor_metrics(rows: list[CadvisorContainer] | None) -> str:
    """The exposition for one scrape; `rows` None means listing the containers failed (container_scrape_error 1)."""
    cpu: list[Sample] = []
    memory: list[Sample] = []
    fs: list[Sample] = []
    rx: list[Sample] = []
    tx: list[Sample] = []
    start: list[Sample] = []
    # (resource, "waiting" | "stalled") -> samples: waiting is PSI's "some" line, stalled its "full" line
    pressure: dict[tuple[str, str], list[Sample]] = {
        (resource, kind): [] for resource, _ in PRESSURE_RESOURCES for kind in ("waiting", "stalled")
    }
    for row in rows or ():
        labels = row.labels()
        if row.start_time is not None:
            start.append(Sample.of(float(int(row.start_time.timestamp())), **labels))
        # as cAdvisor: no per-CPU series (the kubelet leaves them out), and none for a cgroup that used no CPU yet
        if row.cpu_usage_ns:
            cpu.append(Sample.of(row.cpu_usage_ns / NANOS, row.time, cpu="total", **labels))
        if row.working_set_bytes is not None:
            memory.append(Sample.of(row.working_set_bytes, row.time, **labels))
        for device, used in row.fs:
            fs.append(Sample.of(used, row.time, device=device, **labels))
        for counters in row.network:
            rx.append(Sample.of(counters.rx_bytes, row.time, interface=counters.interface, **labels))
            tx.append(Sample.of(counters.tx_bytes, row.time, interface=counters.interface, **labels))
        for resource, _ in PRESSURE_RESOURCES:
            psi = row.pressure(resource)
            if psi is not None:
                pressure[resource, "waiting"].append(Sample.of(psi.some.total / MICROS, row.time, **labels))
                pressure[resource, "stalled"].append(Sample.of(psi.full.total / MICROS, row.time, **labels))
    return render(
        [
            *pressure_families(pressure),
            Family("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", "counter", cpu),
            Family("container_memory_working_set_bytes", "Current working set in bytes.", "gauge", memory),
            Family(
                "container_fs_usage_bytes",
                "Number of bytes that are consumed by the container on this filesystem.",
                "gauge",
                fs,
            ),
            Family("container_network_receive_bytes_total", "Cumulative count of bytes received", "counter", rx),
            Family("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", "counter", tx),
            Family(
                "container_start_time_seconds",
                "Start time of the container since unix epoch in seconds.",
                "gauge",
                start,
            ),
            Family(
                "container_scrape_error",
                "1 if there was an error while getting container metrics, 0 otherwise",
                "gauge",
                [Sample.of(0.0 if rows is not None else 1.0)],
            ),
        ]
    )


def pressure_families(samples: dict[tuple[str, str], list[Sample]]) -> list[Family]:
    """cAdvisor's six PSI counters, its names and help texts."""
    families: list[Family] = []
    for resource, word in PRESSURE_RESOURCES:
        families.append(
            Family(
                f"container_pressure_{resource}_stalled_seconds_total",
                f"Total time duration no tasks in the container could make progress due to {word} congestion.",
                "counter",
                samples[resource, "stalled"],
            )
        )
        families.append(
            Family(
                f"container_pressure_{resource}_waiting_seconds_total",
                f"Total time duration tasks in the container have waited due to {word} congestion.",
                "counter",
                samples[resource, "waiting"],
            )
        )
    return families
