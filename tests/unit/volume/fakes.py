"""A Mounter that keeps its mount table in memory (same Protocol as LinuxMounter), for tests without root mounts."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nodeagent.volume.errors import MountError
from nodeagent.volume.mounter import MountInfo


@dataclass
class FakeMounter:
    table: list[MountInfo] = field(default_factory=list)
    calls: list[tuple[str, ...]] = field(default_factory=list)
    fail_unmount: set[str] = field(default_factory=set)

    def mounts(self) -> list[MountInfo]:
        return list(self.table)

    def mount_tmpfs(self, target: str, options: Sequence[str]) -> None:
        self.calls.append(("tmpfs", target, ",".join(options)))
        self.table.append(MountInfo(os.path.realpath(target), "tmpfs", "tmpfs"))

    def bind(self, source: str, target: str) -> None:
        self.calls.append(("bind", source, target))
        self.table.append(MountInfo(os.path.realpath(target), "none", os.path.realpath(source)))

    def unmount(self, target: str) -> None:
        self.calls.append(("unmount", target))
        if target in self.fail_unmount:
            raise MountError(f"unmount failed: device or resource busy\nUnmounting arguments: {target}")
        real = os.path.realpath(target)
        for i in range(len(self.table) - 1, -1, -1):
            if self.table[i].mount_point == real:
                del self.table[i]
                return
        raise MountError(f"unmount failed: invalid argument\nUnmounting arguments: {target}")


# Plain file reads for async tests (kept out of the coroutines, which must not block on the file system).


def read_text(*parts: str) -> str:
    return Path(*parts).read_text()


def read_bytes(*parts: str) -> bytes:
    return Path(*parts).read_bytes()


def write_text(text: str, *parts: str) -> None:
    Path(*parts).write_text(text)


def exists(*parts: str) -> bool:
    return os.path.lexists(os.path.join(*parts))


def is_dir(*parts: str) -> bool:
    return os.path.isdir(os.path.join(*parts))


def is_link(*parts: str) -> bool:
    return os.path.islink(os.path.join(*parts))


def real(path: str) -> str:
    return os.path.realpath(path)


def file_mode(*parts: str) -> int:
    return os.stat(os.path.join(*parts)).st_mode & 0o7777
