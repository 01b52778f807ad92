"""Hugepage limits as upstream's GetHugepageLimitsFromResources (kuberuntime_container_linux.go, v1.34)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cri.v1 import api_pb2
from nodeagent.kuberuntime.hugepages import host_page_sizes, hugepage_limits, page_sizes_from_names, unit_size

HOST = ("2MB", "1GB")  # this machine's /sys/kernel/mm/hugepages
MI, GI = 1024**2, 1024**3


@pytest.mark.parametrize(
    ("names", "sizes"),
    [
        (["hugepages-2048kB", "hugepages-1048576kB"], ("2MB", "1GB")),
        (["hugepages-1048576kB", "hugepages-2048kB"], ("1GB", "2MB")),  # the directory's order, as runc's
        (["hugepages-64kB", "hugepages-32768kB", "hugepages-16777216kB"], ("64KB", "32MB", "16GB")),
        (["hugepages-2048kB", "other", "hugepages-2048MB", "hugepages-x kB", "hugepages-kB"], ("2MB",)),
        ([], ()),
    ],
)
def test_page_sizes_from_the_kernel_names(names: list[str], sizes: tuple[str, ...]) -> None:
    assert page_sizes_from_names(names) == sizes


def test_host_page_sizes_read_the_directory(tmp_path: Path) -> None:
    (tmp_path / "hugepages-2048kB").mkdir()
    assert host_page_sizes(str(tmp_path)) == ("2MB",)
    assert host_page_sizes(str(tmp_path / "missing")) == ()


@pytest.mark.parametrize(
    ("size", "unit"),
    [
        (1024, "1KB"),
        (2 * MI, "2MB"),
        (GI, "1GB"),
        (1000, "1000B"),
        (1025, None),
        (1536 * 1024, None),
        (3 * MI, "3MB"),
        (3, "3B"),
    ],
)
def test_unit_size_as_upstream(size: int, unit: str | None) -> None:
    assert unit_size(size) == unit


def _limits(out: list[api_pb2.HugepageLimit]) -> list[tuple[str, int]]:
    return [(h.page_size, h.limit) for h in out]


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        # No hugepages asked for: a zero limit at every size of the host (nodeagent sent none before).
        ({}, [("2MB", 0), ("1GB", 0)]),
        ({"cpu": "1", "memory": "1Gi"}, [("2MB", 0), ("1GB", 0)]),
        ({"hugepages-2Mi": "4Mi"}, [("2MB", 4 * MI), ("1GB", 0)]),
        ({"hugepages-1Gi": "2Gi", "hugepages-2Mi": "2Mi"}, [("2MB", 2 * MI), ("1GB", 2 * GI)]),
        ({"hugepages-2048Ki": "6Mi"}, [("2MB", 6 * MI), ("1GB", 0)]),  # the same size, written otherwise
        # A size the host lacks is not sent; a name that does not parse is skipped.
        ({"hugepages-64Ki": "128Ki", "hugepages-bogus": "1Mi"}, [("2MB", 0), ("1GB", 0)]),
    ],
)
def test_hugepage_limits(limits: dict[str, Any], expected: list[tuple[str, int]]) -> None:
    assert _limits(hugepage_limits(limits, HOST)) == expected


def test_no_hugepages_on_the_host_no_limits() -> None:
    assert hugepage_limits({"hugepages-2Mi": "2Mi"}, ()) == []
