"""Capacity and allocatable in the apiserver's quantity format."""

from __future__ import annotations

import pytest

from nodeagent.nodestatus import allocatable, capacity, node_labels
from nodeagent.nodestatus._quantity import format_binary, format_decimal, format_millicores

GI = 1024**3


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, "0"),
        (100, "100"),
        (1000, "1k"),
        (1023, "1023"),
        (1024, "1Ki"),
        (1025, "1025"),
        (16 * 1024**2, "16Mi"),
        (25142489088, "24553212Ki"),
        (2 * GI, "2Gi"),
    ],
)
def test_format_binary(value: int, expected: str) -> None:
    assert format_binary(value) == expected


@pytest.mark.parametrize(("value", "expected"), [(0, "0"), (110, "110"), (2000, "2k"), (1500000, "1500k")])
def test_format_decimal(value: int, expected: str) -> None:
    assert format_decimal(value) == expected


@pytest.mark.parametrize(("millis", "expected"), [(2000, "2"), (1900, "1900m"), (0, "0"), (100, "100m")])
def test_format_millicores(millis: int, expected: str) -> None:
    assert format_millicores(millis) == expected


def test_capacity() -> None:
    assert capacity(4, 25142489088, 100 * GI, 110, {"2Mi": 0, "1Gi": GI}) == {
        "cpu": "4",
        "ephemeral-storage": "100Gi",
        "hugepages-1Gi": "1Gi",
        "hugepages-2Mi": "0",
        "memory": "24553212Ki",
        "pods": "110",
    }


CAP = {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "100Gi", "pods": "110"}


@pytest.mark.parametrize(
    ("cap", "system", "kube", "eviction", "expected"),
    [
        pytest.param(CAP, {}, {}, {}, CAP, id="nothing reserved"),
        pytest.param(
            CAP,
            {},
            {},
            {"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%"},
            {"cpu": "4", "memory": "8092Mi", "ephemeral-storage": "90Gi", "pods": "110"},
            id="upstream default hard eviction",
        ),
        pytest.param(
            CAP,
            {"cpu": "100m", "memory": "512Mi"},
            {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi"},
            {"memory.available": "5%"},
            {"cpu": "2900m", "memory": "6549825127", "ephemeral-storage": "99Gi", "pods": "110"},
            id="system and kube reserved plus percentage memory threshold",
        ),
        pytest.param(
            CAP,
            {"cpu": "5", "memory": "10Gi"},
            {},
            {},
            {"cpu": "0", "memory": "0", "ephemeral-storage": "100Gi", "pods": "110"},
            id="never negative",
        ),
        pytest.param(
            {**CAP, "hugepages-2Mi": "1Gi"},
            {},
            {},
            {"memory.available": "1Gi"},
            {"cpu": "4", "memory": "6Gi", "ephemeral-storage": "100Gi", "pods": "110", "hugepages-2Mi": "1Gi"},
            id="hugepages come out of memory",
        ),
    ],
)
def test_allocatable(
    cap: dict[str, str],
    system: dict[str, str],
    kube: dict[str, str],
    eviction: dict[str, str],
    expected: dict[str, str],
) -> None:
    assert allocatable(cap, system, kube, eviction) == expected


def test_node_labels() -> None:
    assert node_labels("n1", "linux", "amd64") == {
        "kubernetes.io/hostname": "n1",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
    }
    assert node_labels("n1", "linux", "arm64", hostname="host-a")["kubernetes.io/hostname"] == "host-a"
