"""What the agent does to its own process and host at start, from the KubeletConfiguration, as upstream's kubelet
does in cmd/kubelet/app/server.go:

- `failCgroupV1: true` on a cgroup v1 host stops start-up ("kubelet is configured to not run on a host using cgroup
  v1"); on a v2 host it changes nothing.
- `maxOpenFiles` (default 1000000): the agent's own RLIMIT_NOFILE, soft and hard. A refusal (a container without
  CAP_SYS_RESOURCE, as on this project's machines) is logged and start-up goes on, as upstream ("Failed to set
  rlimit on max file handles").
- `oomScoreAdj` (default -999): the agent's own /proc/self/oom_score_adj, so the kernel's OOM killer picks pods
  before it. A refusal is logged and start-up goes on, as upstream ("Failed to ApplyOOMScoreAdj").

The system calls go through `ProcessControls`, so tests pass fakes.
"""

from __future__ import annotations

import logging
import os
import resource
from collections.abc import Callable
from dataclasses import dataclass

from nodeagent.config import KubeletConfiguration

log = logging.getLogger(__name__)

CGROUP_MOUNT = "/sys/fs/cgroup"


def cgroup_v1_problem(config: KubeletConfiguration, *, unified: bool) -> str | None:
    """Why the agent must not start on this host's cgroups, or None (upstream's failCgroupV1 check)."""
    if config.fail_cgroup_v1 and not unified:
        return (
            "kubelet is configured to not run on a host using cgroup v1 (failCgroupV1: true); this host's cgroups are "
            "v1: set failCgroupV1: false or run on a cgroup v2 host"
        )
    return None


def host_is_unified(mount: str = CGROUP_MOUNT) -> bool:
    """Whether the host runs the cgroup v2 unified hierarchy (its root has cgroup.controllers)."""
    return os.path.exists(os.path.join(mount, "cgroup.controllers"))


def _write_oom_score_adj(value: int) -> None:
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write(str(value))


@dataclass(frozen=True)
class ProcessControls:
    set_nofile: Callable[[int], None] = lambda n: resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    set_oom_score_adj: Callable[[int], None] = _write_oom_score_adj


def apply_process_settings(config: KubeletConfiguration, controls: ProcessControls | None = None) -> list[str]:
    """Set the agent's open files limit and OOM score adjustment; returns what could not be set (also logged)."""
    use = controls or ProcessControls()
    failed: list[str] = []
    try:
        use.set_nofile(config.max_open_files)
    except (OSError, ValueError) as exc:
        failed.append(f"maxOpenFiles={config.max_open_files}: {exc}")
        log.warning("failed to set rlimit on max file handles max_open_files=%d error=%s", config.max_open_files, exc)
    try:
        use.set_oom_score_adj(config.oom_score_adj)
    except OSError as exc:
        failed.append(f"oomScoreAdj={config.oom_score_adj}: {exc}")
        log.warning("failed to apply oom score adj oom_score_adj=%d error=%s", config.oom_score_adj, exc)
    return failed


__all__ = [
    "ProcessControls",
    "apply_process_settings",
    "cgroup_v1_problem",
    "host_is_unified",
]
