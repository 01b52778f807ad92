"""The runtime-spec half of the corpus: normalisation of containerd's verbose info and its comparison (pure)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.differential.compare import Recording, compare
from tests.differential.normalise import Context
from tests.differential.runtimespec import Roots, merge, object_state, pod_cgroup_state
from tests.differential.scenario import KnownDifference

UID = "0d4c5c1e-1111-2222-3333-444455556666"
SANDBOX_ID = "a" * 64
CTX = Context(namespace="d-na-x-abcde", uids={"p": UID}, node="node1")
ROOTS = Roots(
    agents=("/tb/kubelet", "/tb/upstream-kubelet"),
    testbed="/tb",
    pod_logs=("/var/log/pods", "/tb/upstream-kubelet/pod-logs"),
)
DEFAULT_CAPS = ["CAP_CHOWN", "CAP_KILL", "CAP_NET_BIND_SERVICE"]


def info(
    *, root: str = "/tb/kubelet", logs: str = "/var/log/pods", pid: int = 4242, caps: list[str] | None = None
) -> dict[str, Any]:
    """A container's verbose info as containerd 1.7 gives it (cut down to one of each kind of thing)."""
    caps = DEFAULT_CAPS if caps is None else caps
    return {
        "sandboxID": SANDBOX_ID,
        "pid": pid,
        "snapshotKey": "b" * 64,
        "runtimeType": "io.containerd.runc.v2",
        "config": {
            "metadata": {"name": "main", "attempt": 3},
            "annotations": {"io.kubernetes.container.hash": "1a2b3c4d", "io.kubernetes.container.restartCount": "3"},
            "log_path": "main/3.log",
            "log_directory": f"{logs}/{CTX.namespace}_p_{UID}",
            "envs": [{"key": "POD_UID", "value": UID}],
        },
        "runtimeSpec": {
            "process": {
                "args": ["sleep", "3600"],
                "env": ["PATH=/bin", "POD_IP=198.18.0.7", f"POD_UID={UID}"],
                "user": {"uid": 0, "gid": 0, "additionalGids": [10, 0]},
                "capabilities": {"bounding": list(reversed(caps)), "effective": caps, "permitted": caps},
            },
            "mounts": [
                {
                    "destination": "/etc/hosts",
                    "type": "bind",
                    "source": f"{root}/pods/{UID}/etc-hosts",
                    "options": ["rw", "rbind", "rprivate"],
                },
                {
                    "destination": "/dev/termination-log",
                    "type": "bind",
                    "source": f"{root}/pods/{UID}/containers/main/0a1b2c3d",
                    "options": ["rbind"],
                },
                {
                    "destination": "/dev/shm",
                    "type": "bind",
                    "source": f"/tb/containerd/state/sandboxes/{SANDBOX_ID}/shm",
                    "options": ["rbind"],
                },
            ],
            "linux": {
                "namespaces": [{"type": "pid"}, {"type": "network", "path": f"/proc/{pid}/ns/net"}],
                "cgroupsPath": f"/nodeagent-x/kubepods/besteffort/pod{UID}/{'c' * 64}",
                "seccomp": {"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "A"}]},
            },
            "annotations": {
                "io.kubernetes.cri.sandbox-id": SANDBOX_ID,
                "io.kubernetes.cri.sandbox-namespace": CTX.namespace,
            },
        },
    }


def state(**kw: Any) -> dict[str, str]:
    return object_state("container[p/main]", info(**kw), CTX, ROOTS)


def test_normalised_lines() -> None:
    s = state()
    prefix = "container[p/main]."
    want = {
        "config.metadata.attempt": "<attempt>",
        "config.annotations.io.kubernetes.container.hash": "<hash>",
        "config.annotations.io.kubernetes.container.restartCount": "<attempt>",
        "config.log_path": '"main/<attempt>.log"',
        "config.log_directory": '"<podlogs>/<ns>_p_<uid:p>"',
        "config.envs.POD_UID.value": '"<uid:p>"',
        "runtimeSpec.process.args": '"[\\"sleep\\", \\"3600\\"]"',
        "runtimeSpec.process.env.POD_IP": '"<ip>"',
        "runtimeSpec.process.env.POD_UID": '"<uid:p>"',
        "runtimeSpec.process.user.additionalGids": '"[0, 10]"',
        "runtimeSpec.process.capabilities.bounding": '"[\\"CAP_CHOWN\\", \\"CAP_KILL\\", \\"CAP_NET_BIND_SERVICE\\"]"',
        "runtimeSpec.mounts./etc/hosts.source": '"<root>/pods/<uid:p>/etc-hosts"',
        "runtimeSpec.mounts./etc/hosts.options": '"[\\"rbind\\", \\"rprivate\\", \\"rw\\"]"',
        "runtimeSpec.mounts./dev/termination-log.source": '"<root>/pods/<uid:p>/containers/main/<rand>"',
        "runtimeSpec.mounts./dev/shm.source": '"<testbed>/containerd/state/sandboxes/<hex>/shm"',
        "runtimeSpec.linux.namespaces.pid.type": '"pid"',
        "runtimeSpec.linux.namespaces.network.path": '"/proc/<pid>/ns/net"',
        "runtimeSpec.linux.cgroupsPath": '"/nodeagent-x/kubepods/besteffort/pod<uid:p>/<hex>"',
        "runtimeSpec.linux.seccomp.defaultAction": '"SCMP_ACT_ERRNO"',
        "runtimeSpec.linux.seccomp.syscalls.count": "1",
        "runtimeSpec.annotations.io.kubernetes.cri.sandbox-id": '"<hex>"',
        "runtimeSpec.annotations.io.kubernetes.cri.sandbox-namespace": '"<ns>"',
        "runtimeType": '"io.containerd.runc.v2"',
    }
    for path, value in want.items():
        assert s[prefix + path] == value, path
    # containerd's bookkeeping is not compared
    assert not [k for k in s if k.endswith((".pid", ".sandboxID", ".snapshotKey"))]


def test_what_differs_by_run_or_agent_root_is_the_same() -> None:
    assert state() == object_state(
        "container[p/main]", info(root="/tb/upstream-kubelet", logs="/tb/upstream-kubelet/pod-logs", pid=99), CTX, ROOTS
    )


def _rec(agent: str, runtime: dict[str, str]) -> Recording:
    return Recording(agent=agent, states={"p": [{"phase": '"Running"'}]}, outcomes=["1 create: ok"], runtime=runtime)


def test_a_capability_never_added_is_a_difference() -> None:
    """The bug of the previous round: the API status is the same, the runtime spec is not."""
    added = state(caps=[*DEFAULT_CAPS, "CAP_NET_ADMIN"])
    result = compare("s", _rec("nodeagent", state()), _rec("kubelet", added), ())
    assert not result.same
    assert "CAP_NET_ADMIN" in result.diff
    assert "runtime container[p/main]" in result.diff
    assert "runtimeSpec.process.capabilities.bounding" in result.diff


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda i: i["runtimeSpec"]["process"]["user"].update(uid=1000), "process.user.uid"),
        (lambda i: i["runtimeSpec"]["mounts"][0]["options"].append("ro"), "mounts./etc/hosts.options"),
        (lambda i: i["runtimeSpec"]["linux"]["seccomp"]["syscalls"].append({"names": ["x"]}), "syscalls.sha256"),
        (lambda i: i["runtimeSpec"]["linux"]["namespaces"].pop(0), "namespaces.pid.type"),
        (lambda i: i["runtimeSpec"]["process"].update(noNewPrivileges=True), "noNewPrivileges"),
        (lambda i: i.update(runtimeType="io.containerd.kata.v2"), "runtimeType"),
    ],
)
def test_each_kind_of_field_is_compared(change: Any, needle: str) -> None:
    other = copy.deepcopy(info())
    change(other)
    result = compare("s", _rec("a", state()), _rec("b", object_state("container[p/main]", other, CTX, ROOTS)), ())
    assert not result.same
    assert needle in result.diff


def test_a_known_difference_explains_a_runtime_line() -> None:
    added = state(caps=[*DEFAULT_CAPS, "CAP_NET_ADMIN"])
    known = (KnownDifference(reason="why", path="container[*].runtimeSpec.process.capabilities.*"),)
    result = compare("s", _rec("a", state()), _rec("b", added), known)
    assert result.same, result.diff
    assert result.kept == ("why",)


def test_an_object_on_one_side_only_is_a_difference() -> None:
    result = compare("s", _rec("a", state()), _rec("b", {}), ())
    assert not result.same
    assert "container[p/main].runtimeType" in result.diff


def test_merge_keeps_each_object_as_first_seen() -> None:
    seen: dict[str, str] = {"container[p/a].x": "1"}
    merge(seen, {"container[p/a].x": "2", "container[p/a].y": "2", "sandbox[p].z": "3"})
    assert seen == {"container[p/a].x": "1", "sandbox[p].z": "3"}


def test_pod_cgroup_values_are_read_from_the_sandbox_cgroup_parent(tmp_path: Path) -> None:
    parent = f"/kubepods/burstable/pod{UID}"
    for controller, name, value in (
        ("cpu", "cpu.shares", "204"),
        ("cpu", "cpu.cfs_quota_us", "100000"),
        ("cpu", "cpu.cfs_period_us", "100000"),
        ("memory", "memory.limit_in_bytes", "268435456"),
    ):
        directory = tmp_path / controller / parent.strip("/")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(value + "\n")
    assert pod_cgroup_state("sandbox[p]", parent, CTX, tmp_path) == {
        "sandbox[p].podCgroup.cpu.shares": "204",
        "sandbox[p].podCgroup.cpu.cfs_quota_us": "100000",
        "sandbox[p].podCgroup.cpu.cfs_period_us": "100000",
        "sandbox[p].podCgroup.memory.limit_in_bytes": "268435456",
    }
    assert pod_cgroup_state("sandbox[p]", "", CTX, tmp_path) == {}


def test_pod_cgroup_values_on_cgroup_v2(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    directory = tmp_path / "kubepods" / "burstable" / "podx"
    directory.mkdir(parents=True)
    (directory / "cpu.max").write_text("100000 100000\n")
    (directory / "memory.max").write_text("max\n")
    assert pod_cgroup_state("sandbox[p]", "/kubepods/burstable/podx", CTX, tmp_path) == {
        "sandbox[p].podCgroup.cpu.max": "100000 100000",
        "sandbox[p].podCgroup.memory.max": "max",
    }
