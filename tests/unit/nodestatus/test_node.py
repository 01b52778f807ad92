"""Node status, registration, reporting cadence and the lease."""

from __future__ import annotations

import dataclasses
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nodeagent.config import Taint, TaintEffect, defaults
from nodeagent.nodestatus import (
    NodeFacts,
    build_node_status,
    gather_node_facts,
    initial_node,
    lease_object,
    node_conditions,
    should_report,
)
from nodeagent.nodestatus.facts import goarch, read_os_image
from nodeagent.version import NODEAGENT_VERSION

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)

FACTS = NodeFacts(
    hostname="n1",
    internal_ip="192.168.1.10",
    machine_id="mid",
    boot_id="bid",
    system_uuid="uuid",
    kernel_version="6.1.0",
    os_image="Debian GNU/Linux 13 (trixie)",
    container_runtime_version="containerd://1.7.24",
    kubelet_version="v1.31.0",
    architecture="amd64",
    operating_system="linux",
    cpu_count=2,
    memory_bytes=4 * 1024**3,
    ephemeral_storage_bytes=20 * 1024**3,
    daemon_port=10250,
)


def test_build_node_status() -> None:
    conditions = node_conditions([], now=T0, runtime_ready=True)
    status = build_node_status(FACTS, defaults(), conditions)
    assert status["capacity"] == {"cpu": "2", "ephemeral-storage": "20Gi", "memory": "4Gi", "pods": "110"}
    assert status["allocatable"] == {"cpu": "2", "ephemeral-storage": "18Gi", "memory": "3996Mi", "pods": "110"}
    assert status["conditions"] == conditions
    assert status["addresses"] == [
        {"type": "InternalIP", "address": "192.168.1.10"},
        {"type": "Hostname", "address": "n1"},
    ]
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}
    assert status["nodeInfo"] == {
        "machineID": "mid",
        "systemUUID": "uuid",
        "bootID": "bid",
        "kernelVersion": "6.1.0",
        "osImage": "Debian GNU/Linux 13 (trixie)",
        "containerRuntimeVersion": "containerd://1.7.24",
        "kubeletVersion": "v1.31.0",
        "operatingSystem": "linux",
        "architecture": "amd64",
    }


def test_initial_node() -> None:
    config = dataclasses.replace(
        defaults(),
        pod_cidr="10.244.1.0/24",
        register_with_taints=(Taint(key="dedicated", value="infra", effect=TaintEffect.NO_SCHEDULE),),
    )
    node = initial_node("n1", FACTS, config)
    assert node["apiVersion"] == "v1"
    assert node["kind"] == "Node"
    assert node["metadata"]["name"] == "n1"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "n1"
    assert node["metadata"]["labels"]["beta.kubernetes.io/arch"] == "amd64"
    assert node["metadata"]["annotations"] == {
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        "nodeagent.io/version": NODEAGENT_VERSION,
    }
    assert node["spec"] == {
        "podCIDR": "10.244.1.0/24",
        "podCIDRs": ["10.244.1.0/24"],
        "taints": [{"key": "dedicated", "effect": "NoSchedule", "value": "infra"}],
    }
    assert node["status"]["capacity"]["pods"] == "110"


def test_initial_node_without_extras() -> None:
    assert initial_node("n1", FACTS, defaults())["spec"] == {}


STATUS: dict[str, Any] = {
    "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "a", "lastTransitionTime": "t"}],
    "capacity": {"cpu": "2"},
}


@pytest.mark.parametrize(
    ("last", "new", "since_last", "expected"),
    [
        (None, STATUS, timedelta(0), True),
        (STATUS, STATUS, timedelta(seconds=10), False),
        (
            STATUS,
            {**STATUS, "conditions": [{**STATUS["conditions"][0], "lastHeartbeatTime": "b"}]},
            timedelta(seconds=10),
            False,
        ),
        (
            STATUS,
            {**STATUS, "conditions": [{**STATUS["conditions"][0], "status": "False"}]},
            timedelta(seconds=10),
            True,
        ),
        (STATUS, {**STATUS, "capacity": {"cpu": "4"}}, timedelta(seconds=10), True),
        (STATUS, STATUS, timedelta(minutes=5), True),
        (STATUS, STATUS, timedelta(minutes=4, seconds=59), False),
    ],
)
def test_should_report(last: dict[str, Any] | None, new: dict[str, Any], since_last: timedelta, expected: bool) -> None:
    assert (
        should_report(last, new, now=T0 + since_last, last_report_time=T0, report_frequency=timedelta(minutes=5))
        is expected
    )


def test_lease_object() -> None:
    now = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
    assert lease_object("n1", "uid-1", duration_seconds=40, now=now) == {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "n1",
            "namespace": "kube-node-lease",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-1"}],
        },
        "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40, "renewTime": "2024-05-01T12:00:00.123456Z"},
    }
    assert lease_object("n1", "u", duration_seconds=40, now=T0, holder="h")["spec"]["renewTime"] == (
        "2024-05-01T12:00:00.000000Z"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('NAME="Debian"\nPRETTY_NAME="Debian GNU/Linux 13 (trixie)"\n', "Debian GNU/Linux 13 (trixie)"),
        ("PRETTY_NAME=Alpine\n", "Alpine"),
        ("NAME=x\n", "Linux"),
    ],
)
def test_read_os_image(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "os-release"
    path.write_text(text)
    assert read_os_image(str(path)) == expected


def test_read_os_image_missing(tmp_path: Path) -> None:
    assert read_os_image(str(tmp_path / "none")) == "Linux"


@pytest.mark.parametrize(("machine", "arch"), [("x86_64", "amd64"), ("aarch64", "arm64"), ("s390x", "s390x")])
def test_goarch(machine: str, arch: str) -> None:
    assert goarch(machine) == arch


def test_gather_node_facts(tmp_path: Path) -> None:
    (tmp_path / "machine-id").write_text("abc123\n")
    (tmp_path / "boot_id").write_text("boot-1\n")
    (tmp_path / "os-release").write_text('PRETTY_NAME="Test OS 1"\n')
    (tmp_path / "uuid").write_text("UUID-1\n")

    def uname() -> os.uname_result:
        return os.uname_result(("Linux", "Node-A", "6.1.0-test", "#1", "aarch64"))

    facts = gather_node_facts(
        container_runtime_version="containerd://1.7.24",
        kubelet_version="v1.31.0",
        internal_ip="10.0.0.1",
        daemon_port=10250,
        root_dir=str(tmp_path / "does" / "not" / "exist"),
        machine_id_paths=[str(tmp_path / "missing"), str(tmp_path / "machine-id")],
        boot_id_path=str(tmp_path / "boot_id"),
        os_release_path=str(tmp_path / "os-release"),
        product_uuid_path=str(tmp_path / "uuid"),
        uname=uname,
    )
    assert (facts.hostname, facts.machine_id, facts.boot_id, facts.system_uuid) == (
        "node-a",
        "abc123",
        "boot-1",
        "UUID-1",
    )
    assert (facts.kernel_version, facts.os_image, facts.architecture, facts.operating_system) == (
        "6.1.0-test",
        "Test OS 1",
        "arm64",
        "linux",
    )
    assert facts.internal_ip == "10.0.0.1"
    assert facts.cpu_count >= 1
    assert facts.memory_bytes > 0
    assert facts.ephemeral_storage_bytes > 0


def test_gather_node_facts_missing_files(tmp_path: Path) -> None:
    facts = gather_node_facts(
        container_runtime_version="containerd://1.7.24",
        kubelet_version="v1.31.0",
        hostname="given",
        internal_ip="",
        root_dir=str(tmp_path),
        machine_id_paths=[str(tmp_path / "a")],
        boot_id_path=str(tmp_path / "b"),
        os_release_path=str(tmp_path / "c"),
        product_uuid_path=str(tmp_path / "d"),
    )
    assert (facts.hostname, facts.machine_id, facts.boot_id, facts.system_uuid, facts.os_image) == (
        "given",
        "",
        "",
        "",
        "Linux",
    )
