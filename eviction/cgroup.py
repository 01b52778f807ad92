"""Readers of cgroup memory files, as pure parsers of their content: text in, numbers out.

The working set is what upstream's eviction compares (through cAdvisor): usage minus the inactive file cache, which
the kernel can drop without pressure, never below zero.

- cgroup v1: usage is memory.usage_in_bytes, the inactive cache `total_inactive_file` of memory.stat (the
  hierarchical figure: the root and kubepods cgroups include their children).
- cgroup v2: usage is memory.current and the inactive cache `inactive_file` (v2 is always hierarchical). The root
  cgroup has no memory.current; there, as runc does, usage is `anon` + `file` of the root's memory.stat.

The wiring reads the files (root: /sys/fs/cgroup/memory or /sys/fs/cgroup; kubepods below it) and hands the text in.
The arithmetic on numbers (`working_set`, `usage_v2`, `limit_or_unlimited`) is also what nodeagent's stats provider
uses for every cgroup it reads: one working set for eviction and the Summary API alike.
"""

from __future__ import annotations

from collections.abc import Mapping

# As cAdvisor: a limit above 2^62 means unlimited (v1 writes 9223372036854771712 for "no limit").
_UNLIMITED_ABOVE = 1 << 62


class CgroupParseError(ValueError):
    """A cgroup file's content is not what the kernel writes."""


def parse_value(text: str, *, name: str = "value") -> int:
    """A single-number file (memory.usage_in_bytes, memory.current)."""
    try:
        return int(text.strip())
    except ValueError as e:
        raise CgroupParseError(f"{name}: not a number: {text.strip()[:40]!r}") from e


def parse_flat_keyed(text: str, *, name: str = "memory.stat") -> dict[str, int]:
    """A "key value" per line file (memory.stat, memory.events)."""
    result: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise CgroupParseError(f"{name}: bad line {line!r}")
        try:
            result[parts[0]] = int(parts[1])
        except ValueError as e:
            raise CgroupParseError(f"{name}: bad value in line {line!r}") from e
    return result


def working_set(usage: int, inactive_file: int | None) -> int:
    """Usage minus the inactive file cache, never below 0 (cAdvisor's setMemoryStats)."""
    if inactive_file is None:
        return usage  # as cAdvisor: without the figure, the whole usage counts
    return max(0, usage - inactive_file)


def usage_v2(current: int | None, stat: Mapping[str, int]) -> int:
    """cgroup v2 usage: memory.current, or for the root cgroup (None: it has none) anon + file of its memory.stat, as
    runc's rootStatsFromMeminfo."""
    if current is None:
        return stat.get("anon", 0) + stat.get("file", 0)
    return current


def limit_or_unlimited(limit: int) -> int | None:
    """A memory limit as a number, None when it means unlimited (upstream isMemoryUnlimited)."""
    return None if limit > _UNLIMITED_ABOVE else limit


def working_set_v1(usage_in_bytes: str, memory_stat: str) -> int:
    """cgroup v1: memory.usage_in_bytes minus total_inactive_file."""
    usage = parse_value(usage_in_bytes, name="memory.usage_in_bytes")
    return working_set(usage, parse_flat_keyed(memory_stat).get("total_inactive_file"))


def working_set_v2(memory_stat: str, memory_current: str | None) -> int:
    """cgroup v2: memory.current minus inactive_file; pass None for the root cgroup, which has no memory.current."""
    stat = parse_flat_keyed(memory_stat)
    current = None if memory_current is None else parse_value(memory_current, name="memory.current")
    return working_set(usage_v2(current, stat), stat.get("inactive_file"))


def memory_limit(text: str) -> int | None:
    """memory.limit_in_bytes (v1) or memory.max (v2): the limit, or None when unlimited."""
    if text.strip() == "max":
        return None
    return limit_or_unlimited(parse_value(text, name="memory limit"))
