"""The swap limit as upstream's configureContainerSwapResources with NoSwap (kuberuntime_container_linux.go, v1.34)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cri.v1 import api_pb2
from nodeagent.kuberuntime.swap import SwapSupport, apply_no_swap, detect_swap_support, own_v2_cgroup


def _v1(root: Path, *, memsw: bool) -> Path:
    (root / "memory").mkdir(parents=True)
    if memsw:
        (root / "memory" / "memory.memsw.limit_in_bytes").write_text("9223372036854771712\n")
    return root


def _v2(root: Path, own: str, *, swap_max: bool) -> tuple[Path, Path]:
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory\n")
    directory = root / own.lstrip("/")
    directory.mkdir(parents=True, exist_ok=True)
    if swap_max:
        (directory / "memory.swap.max").write_text("max\n")
    proc = root.parent / "proc-self-cgroup"
    proc.write_text(f"0::{own}\n")
    return root, proc


@pytest.mark.parametrize("memsw", [True, False])
def test_v1_controller_is_memsw_at_the_root(tmp_path: Path, memsw: bool) -> None:
    support = detect_swap_support(_v1(tmp_path / "cg", memsw=memsw), tmp_path / "absent")
    assert support == SwapSupport(cgroup_v2=False, controller=memsw)


@pytest.mark.parametrize("swap_max", [True, False])
def test_v2_controller_is_swap_max_in_the_own_cgroup(tmp_path: Path, swap_max: bool) -> None:
    root, proc = _v2(tmp_path / "cg", "/system.slice/agent.service", swap_max=swap_max)
    assert detect_swap_support(root, proc) == SwapSupport(cgroup_v2=True, controller=swap_max)


def test_v2_without_a_readable_own_cgroup_has_no_controller(tmp_path: Path) -> None:
    root, _ = _v2(tmp_path / "cg", "/", swap_max=True)
    assert detect_swap_support(root, tmp_path / "absent") == SwapSupport(cgroup_v2=True, controller=False)


@pytest.mark.parametrize(
    ("text", "own"),
    [
        ("0::/a/b\n", "/a/b"),
        ("12:memory:/x\n1:name=systemd:/y\n0::/z\n", "/z"),
        ("12:memory:/x\n", None),
        ("", None),
    ],
)
def test_own_v2_cgroup(text: str, own: str | None) -> None:
    assert own_v2_cgroup(text) == own


@pytest.mark.parametrize(
    ("support", "memory", "swap", "unified"),
    [
        # cgroup v1 with memsw: no swap beyond the memory limit (nodeagent left it unset before).
        (SwapSupport(cgroup_v2=False, controller=True), 64 << 20, 64 << 20, {}),
        (SwapSupport(cgroup_v2=False, controller=True), 0, 0, {}),  # no limit: none, which the runtime ignores
        (SwapSupport(cgroup_v2=False, controller=False), 64 << 20, 0, {}),
        # cgroup v2: memory.swap.max 0 in the unified map, with a limit or without.
        (SwapSupport(cgroup_v2=True, controller=True), 64 << 20, 0, {"memory.swap.max": "0"}),
        (SwapSupport(cgroup_v2=True, controller=True), 0, 0, {"memory.swap.max": "0"}),
        (SwapSupport(cgroup_v2=True, controller=False), 64 << 20, 0, {}),
    ],
)
def test_no_swap(support: SwapSupport, memory: int, swap: int, unified: dict[str, str]) -> None:
    resources = api_pb2.LinuxContainerResources(memory_limit_in_bytes=memory)
    apply_no_swap(resources, support)
    assert (resources.memory_swap_limit_in_bytes, dict(resources.unified)) == (swap, unified)
