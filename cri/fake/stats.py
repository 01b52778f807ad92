"""Usage figures for the stats calls, from each container's behaviour: CPU at a steady rate, a fixed working set."""

from __future__ import annotations

from collections.abc import Iterable

from cri.fake.state import Container, Sandbox
from cri.v1 import api_pb2


def _cpu(containers: Iterable[Container], now_ns: int) -> api_pb2.CpuUsage:
    total_ns = 0
    nano_cores = 0
    for c in containers:
        if c.started_at == 0:
            continue
        end = c.finished_at if c.state == api_pb2.CONTAINER_EXITED else now_ns
        total_ns += c.cpu_millicores * max(0, end - c.started_at) // 1000
        if c.state == api_pb2.CONTAINER_RUNNING:
            nano_cores += c.cpu_millicores * 1_000_000
    return api_pb2.CpuUsage(
        timestamp=now_ns,
        usage_core_nano_seconds=api_pb2.UInt64Value(value=total_ns),
        usage_nano_cores=api_pb2.UInt64Value(value=nano_cores),
    )


def _memory(containers: Iterable[Container], now_ns: int) -> api_pb2.MemoryUsage:
    used = sum(c.memory_bytes for c in containers if c.state == api_pb2.CONTAINER_RUNNING)
    return api_pb2.MemoryUsage(
        timestamp=now_ns,
        working_set_bytes=api_pb2.UInt64Value(value=used),
        usage_bytes=api_pb2.UInt64Value(value=used),
        rss_bytes=api_pb2.UInt64Value(value=used),
        page_faults=api_pb2.UInt64Value(value=0),
        major_page_faults=api_pb2.UInt64Value(value=0),
    )


def container_stats(c: Container, now_ns: int) -> api_pb2.ContainerStats:
    return api_pb2.ContainerStats(
        attributes=api_pb2.ContainerAttributes(
            id=c.id, metadata=c.config.metadata, labels=c.config.labels, annotations=c.config.annotations
        ),
        cpu=_cpu([c], now_ns),
        memory=_memory([c], now_ns),
        writable_layer=api_pb2.FilesystemUsage(
            timestamp=now_ns,
            fs_id=api_pb2.FilesystemIdentifier(mountpoint="/"),
            used_bytes=api_pb2.UInt64Value(value=4096),
            inodes_used=api_pb2.UInt64Value(value=1),
        ),
    )


def sandbox_stats(s: Sandbox, containers: list[Container], now_ns: int) -> api_pb2.PodSandboxStats:
    meta = s.config.metadata
    return api_pb2.PodSandboxStats(
        attributes=api_pb2.PodSandboxAttributes(
            id=s.id, metadata=meta, labels=s.config.labels, annotations=s.config.annotations
        ),
        linux=api_pb2.LinuxPodSandboxStats(
            cpu=_cpu(containers, now_ns),
            memory=_memory(containers, now_ns),
            network=api_pb2.NetworkUsage(timestamp=now_ns),
            process=api_pb2.ProcessUsage(
                timestamp=now_ns,
                process_count=api_pb2.UInt64Value(
                    value=sum(1 for c in containers if c.state == api_pb2.CONTAINER_RUNNING)
                ),
            ),
            containers=[container_stats(c, now_ns) for c in containers],
        ),
    )
