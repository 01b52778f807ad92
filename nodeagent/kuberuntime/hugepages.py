"""A container's hugepage limits for the CRI (upstream GetHugepageLimitsFromResources, kuberuntime_container_linux.go).

As the kubelet v1.34 does:

- Every page size the host offers gets a limit, zero unless the container's `hugepages-<size>` limit names that
  size: a container that asks for no hugepages may use none, at any size. The host's sizes are the directories of
  `/sys/kernel/mm/hugepages` (`hugepages-2048kB` is "2MB", `hugepages-1048576kB` "1GB"), read once and kept in the
  order the directory lists them (runc's HugePageSizes).
- A `hugepages-<quantity>` limit's page size is the quantity in bytes written in the largest unit that divides it
  ("2Mi" → "2MB"); a name that does not parse, or a size no unit divides, is skipped (upstream logs and goes on). A
  limit for a size the host lacks is dropped: only the host's sizes are sent.
- Pod-level hugepage limits (`spec.resources`, PodLevelResources) are not read here: upstream v1.34 too builds a
  container's hugepage limits from the container's own limits only. They count at admission
  (nodeagent.admission.resources).

containerd 1.7 leaves zero limits out of the OCI spec, so the zero limits change nothing that runc does here; they are
sent because the kubelet sends them (the CRI config is compared with the kubelet's, tests/differential).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cri.v1 import api_pb2
from nodeagent.config.errors import QuantityError
from nodeagent.config.quantity import ceil_int64, parse_quantity

log = logging.getLogger(__name__)

HUGEPAGES_DIR = "/sys/kernel/mm/hugepages"
RESOURCE_PREFIX = "hugepages-"
_UNITS = ("B", "KB", "MB", "GB", "TB", "PB")
UINT64_MAX = 2**64 - 1


def page_sizes_from_names(names: Iterable[str]) -> tuple[str, ...]:
    """The page sizes ("2MB", "1GB", "64KB") the kernel's `hugepages-<n>kB` directory names stand for, in their order;
    other names are skipped."""
    sizes: list[str] = []
    for name in names:
        if not name.startswith("hugepages-"):
            continue
        digits = name.removeprefix("hugepages-")
        if not digits.endswith("kB") or not (digits[:-2].isascii() and digits[:-2].isdigit()):
            continue
        kilobytes = int(digits[:-2])
        if kilobytes >= 1 << 20:
            sizes.append(f"{kilobytes >> 20}GB")
        elif kilobytes >= 1 << 10:
            sizes.append(f"{kilobytes >> 10}MB")
        else:
            sizes.append(f"{kilobytes}KB")
    return tuple(sizes)


@functools.cache
def host_page_sizes(directory: str = HUGEPAGES_DIR) -> tuple[str, ...]:
    """The host's hugepage sizes, read once (none when the directory cannot be read)."""
    try:
        names = os.listdir(directory)  # readdir order, as Go's Readdirnames
    except OSError:
        return ()
    return page_sizes_from_names(names)


def unit_size(size: int) -> str | None:
    """`size` bytes as "<n><unit>" in the largest unit that divides it (upstream HugePageUnitSizeFromByteSize);
    None when the remainder is still above 1024 of a unit below the largest."""
    index = 0
    while size % 1024 == 0 and index < len(_UNITS) - 1:
        size //= 1024
        index += 1
    if size > 1024 and index < len(_UNITS) - 1:
        return None
    return f"{size}{_UNITS[index]}"


def _page_size_of(resource: str) -> str | None:
    try:
        size = ceil_int64(parse_quantity(resource.removeprefix(RESOURCE_PREFIX)))
    except QuantityError:
        log.info("hugepage size not parsed resource=%s", resource)
        return None
    unit = unit_size(size)
    if unit is None:
        log.info("hugepage size invalid resource=%s size=%d", resource, size)
    return unit


def hugepage_limits(limits: Mapping[str, Any], page_sizes: Sequence[str]) -> list[api_pb2.HugepageLimit]:
    """One limit per host page size: the container's `hugepages-*` limit of that size in bytes, else zero."""
    asked: dict[str, int] = {}
    for name, value in limits.items():
        if not str(name).startswith(RESOURCE_PREFIX):
            continue
        size = _page_size_of(str(name))
        if size is None:
            continue
        try:
            amount = ceil_int64(parse_quantity(str(value)))
        except QuantityError:
            log.info("hugepage limit not parsed resource=%s value=%s", name, value)
            continue
        asked[size] = min(max(amount, 0), UINT64_MAX)
    return [api_pb2.HugepageLimit(page_size=size, limit=asked.get(size, 0)) for size in page_sizes]
