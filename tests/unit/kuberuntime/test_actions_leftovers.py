"""What an agent killed mid-way leaves behind, and what the next sync does with it: containers created but never
started (CRI CREATED), extra or not-ready sandboxes. Pure decisions by table, then the runtime manager's calls
against a scripted CRI runtime on a real socket (order of RemoveContainer / CreateContainer, the restart count)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from cri.client import CRIClient
from cri.v1 import api_pb2
from nodeagent.kuberuntime.actions import (
    ContainerState,
    ContainerStatus,
    ContainerToKill,
    ContainerToRemove,
    PodActions,
    RuntimePodStatus,
    SandboxState,
    SandboxStatus,
    compute_pod_actions,
    interrupted_starts_as_created,
    next_restart_count,
    restart_count_from_log_files,
    start_interrupted,
)
from nodeagent.kuberuntime.backoff import Backoff, container_backoff_key
from nodeagent.kuberuntime.hashing import hash_container
from nodeagent.kuberuntime.manager import NodeContext, RuntimeManager
from tests.unit.cri.scripted import Fail, ScriptedRuntime

NOW = 10_000.0
APP: dict[str, Any] = {"name": "app", "image": "busybox:1.36"}
SIDE: dict[str, Any] = {"name": "side", "image": "busybox:1.36", "restartPolicy": "Always"}
INIT1: dict[str, Any] = {"name": "init1", "image": "busybox:1.36"}
INIT2: dict[str, Any] = {"name": "init2", "image": "busybox:1.36"}
SPECS = {c["name"]: c for c in (APP, SIDE, INIT1, INIT2)}
R, E, U, C = ContainerState.RUNNING, ContainerState.EXITED, ContainerState.UNKNOWN, ContainerState.CREATED

NEVER_STARTED = "created, never started, superseded"
OLD_SANDBOX = "in an old sandbox"
PURGED = "init container of a replaced sandbox"
PRUNED_RUN = "older dead instance"


def pod(
    containers: list[dict[str, Any]] | None = None, init: list[dict[str, Any]] | None = None, policy: str = "Always"
) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "default", "uid": "u-1"},
        "spec": {"containers": containers or [APP], "initContainers": init or [], "restartPolicy": policy},
    }


def sandbox(sid: str, ready: bool = True, created: int = 0, attempt: int = 0) -> SandboxStatus:
    state = SandboxState.READY if ready else SandboxState.NOT_READY
    return SandboxStatus(
        id=sid, state=state, attempt=attempt, created_at=created, ip="198.18.0.2" if ready else "", host_network=False
    )


S1 = sandbox("s1", created=10, attempt=1)


def ctr(name: str, state: ContainerState, cid: str, *, sb: str = "s1", exit_code: int = 0, restarts: int = 0) -> Any:
    return ContainerStatus(
        id=cid,
        name=name,
        state=state,
        exit_code=exit_code,
        hash=hash_container(SPECS[name]),
        restart_count=restarts,
        pod_sandbox_id=sb,
        finished_at=1 if state is E else 0,
    )


def status(*containers: ContainerStatus, sandboxes: tuple[SandboxStatus, ...] = (S1,)) -> RuntimePodStatus:
    """Containers and sandboxes newest first, as the builders order them."""
    return RuntimePodStatus(uid="u-1", name="web", namespace="default", sandboxes=sandboxes, containers=containers)


def rm(cid: str, name: str, why: str) -> ContainerToRemove:
    return ContainerToRemove(cid, name, why)


CASES: list[tuple[str, dict[str, Any], RuntimePodStatus, PodActions]] = [
    (
        "created, never started: removed, and a new one started (upstream restarts a created container)",
        pod(),
        status(ctr("app", C, "c0")),
        PodActions(
            sandbox_id="s1",
            attempt=1,
            containers_to_start=("app",),
            containers_to_remove=(rm("c0", "app", NEVER_STARTED),),
        ),
    ),
    (
        "created under restartPolicy Never: started all the same, it never ran",
        pod(policy="Never"),
        status(ctr("app", C, "c0")),
        PodActions(
            sandbox_id="s1",
            attempt=1,
            containers_to_start=("app",),
            containers_to_remove=(rm("c0", "app", NEVER_STARTED),),
        ),
    ),
    (
        "an older created instance beside the running one: removed, nothing started",
        pod(),
        status(ctr("app", R, "c1", restarts=1), ctr("app", C, "c0")),
        PodActions(sandbox_id="s1", attempt=1, containers_to_remove=(rm("c0", "app", NEVER_STARTED),)),
    ),
    (
        "created init container: removed and started again, no kill",
        pod(init=[INIT1, INIT2]),
        status(ctr("init1", C, "i0")),
        PodActions(
            sandbox_id="s1",
            attempt=1,
            init_containers_to_start=("init1",),
            containers_to_remove=(rm("i0", "init1", NEVER_STARTED),),
        ),
    ),
    (
        "created sidecar: removed and started again, no kill",
        pod(init=[SIDE, INIT1]),
        status(ctr("side", C, "x0")),
        PodActions(
            sandbox_id="s1",
            attempt=1,
            init_containers_to_start=("side",),
            containers_to_remove=(rm("x0", "side", NEVER_STARTED),),
        ),
    ),
    (
        "a created app container means init completed (upstream podHasInitialized)",
        pod(init=[INIT1]),
        status(ctr("app", C, "c0")),
        PodActions(
            sandbox_id="s1",
            attempt=1,
            containers_to_start=("app",),
            containers_to_remove=(rm("c0", "app", NEVER_STARTED),),
        ),
    ),
    (
        "unknown init container under Never: the pod is killed, as upstream",
        pod(init=[INIT1], policy="Never"),
        status(ctr("init1", U, "i0")),
        PodActions(kill_pod=True, sandbox_id="s1", attempt=1),
    ),
    (
        "unknown init container: killed with upstream's message, then started",
        pod(init=[INIT1]),
        status(ctr("init1", U, "i0")),
        PodActions(
            sandbox_id="s1",
            attempt=1,
            init_containers_to_start=("init1",),
            containers_to_kill=(
                ContainerToKill(
                    "i0", "init1", 'Init container is in "unknown" state, try killing it before restart', "UnknownState"
                ),
            ),
        ),
    ),
    (
        "an older not-ready sandbox with nothing in it (agent killed during RunPodSandbox): removed",
        pod(),
        status(ctr("app", R, "c0"), sandboxes=(S1, sandbox("s0", ready=False))),
        PodActions(sandbox_id="s1", attempt=1, sandboxes_to_remove=("s0",)),
    ),
    (
        "an older not-ready sandbox with a never-started container: both removed",
        pod(),
        status(ctr("app", R, "c1"), ctr("app", C, "c0", sb="s0"), sandboxes=(S1, sandbox("s0", ready=False))),
        PodActions(
            sandbox_id="s1",
            attempt=1,
            containers_to_remove=(rm("c0", "app", NEVER_STARTED),),
            sandboxes_to_remove=("s0",),
        ),
    ),
    (
        "an older not-ready sandbox holding the last exited run (the status's lastState): kept",
        pod(),
        status(
            ctr("app", R, "c1", restarts=1), ctr("app", E, "c0", sb="s0"), sandboxes=(S1, sandbox("s0", ready=False))
        ),
        PodActions(sandbox_id="s1", attempt=1),
    ),
    (
        "an older not-ready sandbox whose runs are all superseded: removed with them",
        pod(),
        status(
            ctr("app", R, "c2", restarts=2),
            ctr("app", E, "c1", restarts=1),
            ctr("app", E, "c0", sb="s0"),
            sandboxes=(S1, sandbox("s0", ready=False)),
        ),
        PodActions(
            sandbox_id="s1",
            attempt=1,
            containers_to_remove=(rm("c0", "app", PRUNED_RUN),),  # an older dead instance as well
            sandboxes_to_remove=("s0",),
        ),
    ),
    (
        "an older sandbox that is still ready is never removed here (two ready: a new sandbox, as upstream)",
        pod(),
        status(ctr("app", R, "c0"), sandboxes=(S1, sandbox("s0"))),
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="s1", attempt=2, containers_to_start=("app",)),
    ),
    (
        "the newest sandbox not ready: a new one; the old one stays until it is no longer the newest",
        pod(),
        status(ctr("app", C, "c0"), sandboxes=(sandbox("s1", ready=False, attempt=1),)),
        PodActions(
            kill_pod=True,
            create_sandbox=True,
            sandbox_id="s1",
            attempt=2,
            containers_to_start=("app",),
            containers_to_remove=(rm("c0", "app", NEVER_STARTED),),
        ),
    ),
    (
        "a new sandbox: init containers are purged first, as upstream's purgeInitContainers",
        pod(init=[INIT1]),
        status(
            ctr("app", E, "c0", exit_code=1), ctr("init1", E, "i0"), sandboxes=(sandbox("s1", ready=False, attempt=1),)
        ),
        PodActions(
            kill_pod=True,
            create_sandbox=True,
            sandbox_id="s1",
            attempt=2,
            init_containers_to_start=("init1",),
            containers_to_remove=(rm("i0", "init1", PURGED),),
        ),
    ),
    (
        "after a new sandbox, an app run in the old one does not count as initialized: init runs again in order",
        pod(init=[INIT1, INIT2]),
        status(
            ctr("init1", E, "i1", sb="s2", restarts=1),
            ctr("app", E, "c0", exit_code=1, sb="s1"),
            sandboxes=(sandbox("s2", created=20, attempt=2), sandbox("s1", ready=False, attempt=1)),
        ),
        PodActions(sandbox_id="s2", attempt=2, init_containers_to_start=("init2",)),
    ),
    (
        "a sidecar that ended twice: its older run is pruned, as upstream's pruneInitContainersBeforeStart",
        pod(init=[SIDE]),
        status(ctr("side", E, "s2", exit_code=1, restarts=1), ctr("app", R, "c1"), ctr("side", E, "s1", exit_code=1)),
        PodActions(
            sandbox_id="s1",
            attempt=1,
            init_containers_to_start=("side",),
            containers_to_remove=(rm("s1", "side", PRUNED_RUN),),
        ),
    ),
    (
        "an init container that failed, then succeeded: only its newest run stays",
        pod(init=[INIT1]),
        status(ctr("app", R, "c1"), ctr("init1", E, "i2", restarts=1), ctr("init1", E, "i1", exit_code=1)),
        PodActions(sandbox_id="s1", attempt=1, containers_to_remove=(rm("i1", "init1", PRUNED_RUN),)),
    ),
    (
        "a regular container that died twice: the older dead instance goes, as upstream's podContainerDeletor",
        pod(),
        status(ctr("app", E, "c1", restarts=1), ctr("app", E, "c0")),
        PodActions(
            sandbox_id="s1",
            attempt=1,
            containers_to_start=("app",),
            containers_to_remove=(rm("c0", "app", PRUNED_RUN),),
        ),
    ),
    (
        "a running container keeps its one dead predecessor (its lastState)",
        pod(),
        status(ctr("app", R, "c2", restarts=2), ctr("app", E, "c1", restarts=1), ctr("app", E, "c0")),
        PodActions(sandbox_id="s1", attempt=1, containers_to_remove=(rm("c0", "app", PRUNED_RUN),)),
    ),
    (
        "a deleted pod: nothing removed here (termination removes everything)",
        pod() | {"metadata": {"name": "web", "namespace": "default", "uid": "u-1", "deletionTimestamp": "x"}},
        status(ctr("app", C, "c0"), sandboxes=(S1, sandbox("s0", ready=False))),
        PodActions(kill_pod=True),
    ),
]


@pytest.mark.parametrize(("pod_", "runtime", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_leftovers(pod_: dict[str, Any], runtime: RuntimePodStatus, expected: PodActions) -> None:
    assert compute_pod_actions(pod_, runtime, now=NOW, backoff=Backoff()) == expected


def test_back_off_reads_the_newest_exited_run_past_a_created_one() -> None:
    # As upstream's doBackOff: a never-started newer instance does not reset the crash-loop back-off.
    backoff = Backoff(clock=lambda: NOW)
    key = container_backoff_key("u-1", pod()["spec"]["containers"][0])
    backoff.next(key, NOW)
    backoff.next(key, NOW)  # 20 s
    exited = ContainerStatus(id="c0", name="app", state=E, exit_code=1, finished_at=int((NOW - 5) * 1e9))
    runtime = status(ctr("app", C, "c1", restarts=1), exited)
    actions = compute_pod_actions(pod(), runtime, now=NOW, backoff=backoff)
    assert actions.containers_to_start == ()
    assert [w.name for w in actions.backoff] == ["app"]


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        ([], 0),
        (["0.log"], 1),
        (["0.log", "3.log", "1.log"], 4),
        (["2.log.20251125-101010", "0.log"], 3),  # a rotated file counts, as upstream's regexp
        (["x.log", "log", "README", "12.txt"], 0),
    ],
)
def test_restart_count_from_log_files(names: list[str], expected: int) -> None:
    assert restart_count_from_log_files(names) == expected


SECOND = 1_000_000_000
# containerd's record of a start whose caller (an agent since killed) went away mid-call, as seen on the testbed.
CANCELLED = ContainerStatus(
    id="c0",
    name="app",
    state=E,
    exit_code=128,
    reason="StartError",
    message="failed to create containerd task: failed to create shim task: context canceled: unknown",
    created_at=100 * SECOND,
    finished_at=102 * SECOND,
)
SHIM_KILLED = replace(
    CANCELLED, message="failed to create containerd task: failed to start shim: start failed: : signal: killed: unknown"
)
FAILED_START = replace(
    CANCELLED,
    message="failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
    'failed: unable to start container process: exec: "nope": executable file not found in $PATH: unknown',
)


@pytest.mark.parametrize(
    ("containers", "removed", "from_logs", "expected"),
    [
        ((ctr("app", C, "c2", restarts=2), ctr("app", E, "c1", restarts=1)), (), 0, 3),  # upstream's, kept
        ((ctr("app", C, "c2", restarts=2), ctr("app", E, "c1", restarts=1)), ("c2",), 0, 2),
        ((ctr("app", C, "c0"),), ("c0",), 5, 0),  # the never-run's own count: the logs are not asked
        ((replace(CANCELLED, state=C),), ("c0",), 1, 0),  # an interrupted start, shown as created: never ran
        ((CANCELLED,), ("c0",), 1, 1),  # as it is (not turned into created): a removed run, the logs count
        ((ctr("init1", E, "i0"),), ("i0",), 1, 1),  # removed after a run (a purge): the log directory counts
        ((), (), 3, 3),  # no instance at all: the log directory, as upstream
        ((FAILED_START,), (), 0, 1),  # a real start failure counts, as upstream
    ],
    ids=[
        "kept",
        "created-removed",
        "created-only",
        "interrupted-start",
        "exited-removed",
        "purged",
        "no-instance",
        "failed-start",
    ],
)
def test_next_restart_count(
    containers: tuple[ContainerStatus, ...], removed: tuple[str, ...], from_logs: int, expected: int
) -> None:
    name = containers[0].name if containers else "app"
    assert next_restart_count(status(*containers), name, removed=removed, from_logs=from_logs) == expected


@pytest.mark.parametrize(
    ("instance", "created_before", "interrupted"),
    [
        (CANCELLED, 101.0, True),  # created by an earlier agent, its start cancelled
        (SHIM_KILLED, 101.0, True),
        (CANCELLED, 99.0, False),  # created by this agent: its own failed start counts, and is backed off
        (FAILED_START, 101.0, False),  # a start that really failed counts, as upstream
        (replace(CANCELLED, started_at=101 * SECOND), 101.0, False),  # it ran
        (replace(CANCELLED, reason="Error"), 101.0, False),
        (replace(CANCELLED, state=C), 101.0, False),  # created already
    ],
    ids=["cancelled", "shim-killed", "this-agents-own", "really-failed", "ran", "not-a-start-error", "created"],
)
def test_start_interrupted(instance: ContainerStatus, created_before: float, interrupted: bool) -> None:
    assert start_interrupted(instance, created_before=created_before) is interrupted
    converted = interrupted_starts_as_created(status(instance), created_before=created_before)
    assert converted.containers[0].state is (C if interrupted else instance.state)


@pytest.mark.parametrize(
    ("instance", "policy", "expected"),
    [
        (
            CANCELLED,
            "Never",
            PodActions(
                sandbox_id="s1",
                attempt=1,
                containers_to_start=("app",),
                containers_to_remove=(rm("c0", "app", NEVER_STARTED),),
            ),
        ),
        (FAILED_START, "Never", PodActions(kill_pod=True, sandbox_id="s1", attempt=1)),  # as upstream
        (FAILED_START, "Always", PodActions(sandbox_id="s1", attempt=1, containers_to_start=("app",))),
    ],
    ids=["cancelled-start-never-ran", "failed-start-never", "failed-start-always"],
)
def test_a_start_cancelled_by_the_agents_death_counts_as_never_started(
    instance: ContainerStatus, policy: str, expected: PodActions
) -> None:
    runtime = interrupted_starts_as_created(status(instance), created_before=101.0)
    assert compute_pod_actions(pod(policy=policy), runtime, now=NOW, backoff=Backoff()) == expected


async def test_an_interrupted_start_is_replaced_with_the_same_count(
    runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path
) -> None:
    _script(runtime)
    (tmp_path / "default_web_u-1" / "app").mkdir(parents=True)
    (tmp_path / "default_web_u-1" / "app" / "0.log").write_text("")  # opened by the start that was cancelled
    await _manager(client, tmp_path).sync_pod(pod(policy="Never"), status(replace(CANCELLED, pod_sandbox_id="s1")))
    [remove] = runtime.calls_of("RemoveContainer")
    assert isinstance(remove.request, api_pb2.RemoveContainerRequest)
    assert remove.request.container_id == "c0"
    assert _created_attempts(runtime) == [0]


# --- through the runtime manager -------------------------------------------------------------------------------


def _manager(client: CRIClient, log_root: Path) -> RuntimeManager:
    node = NodeContext(node_name="n1", host_ip="127.0.0.1", pod_log_dir_root=str(log_root))
    return RuntimeManager(client.runtime, client.image, node)


def _script(runtime: ScriptedRuntime) -> None:
    runtime.script["ImageStatus"] = api_pb2.ImageStatusResponse(image=api_pb2.Image(id="sha256:1", size=1))
    runtime.script["CreateContainer"] = api_pb2.CreateContainerResponse(container_id="new")


def _created_attempts(runtime: ScriptedRuntime) -> list[int]:
    out = []
    for call in runtime.calls_of("CreateContainer"):
        assert isinstance(call.request, api_pb2.CreateContainerRequest)
        out.append(call.request.config.metadata.attempt)
    return out


@pytest.mark.parametrize(
    ("log_files", "attempt"),
    [
        ([], 0),
        (["0.log"], 0),  # a start cancelled mid-way may have opened its log: the run still never happened
    ],
)
async def test_a_never_started_container_is_removed_before_its_successor_is_created(
    runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path, log_files: list[str], attempt: int
) -> None:
    _script(runtime)
    log_dir = tmp_path / "default_web_u-1" / "app"
    log_dir.mkdir(parents=True)
    for name in log_files:
        (log_dir / name).write_text("")
    result = await _manager(client, tmp_path).sync_pod(pod(), status(ctr("app", C, "c0")))
    assert result.waiting == {}
    assert result.changed
    rpcs = [c.rpc for c in runtime.calls if c.rpc in ("RemoveContainer", "CreateContainer", "StartContainer")]
    assert rpcs == ["RemoveContainer", "CreateContainer", "StartContainer"]
    [remove] = runtime.calls_of("RemoveContainer")
    assert isinstance(remove.request, api_pb2.RemoveContainerRequest)
    assert remove.request.container_id == "c0"
    assert _created_attempts(runtime) == [attempt]


async def test_without_any_instance_the_log_directory_counts(
    runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path
) -> None:
    _script(runtime)
    log_dir = tmp_path / "default_web_u-1" / "app"
    log_dir.mkdir(parents=True)
    for name in ("0.log", "1.log", "1.log.20251125-101010", "notes"):
        (log_dir / name).write_text("")
    await _manager(client, tmp_path).sync_pod(pod(), status())
    assert _created_attempts(runtime) == [2]  # as upstream's calcRestartCountByLogDir


async def test_a_container_still_starting_is_not_replaced_in_this_sync(
    runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path
) -> None:
    _script(runtime)
    message = "failed to set removing state for container: container is in starting state, can't be removed"
    runtime.script["RemoveContainer"] = Fail(grpc.StatusCode.UNKNOWN, message)
    result = await _manager(client, tmp_path).sync_pod(pod(), status(ctr("app", C, "c0")))
    assert runtime.calls_of("CreateContainer") == []
    assert result.retry_after == 1.0  # looked at again soon, when containerd has settled the start


async def test_a_never_started_restart_keeps_the_count_of_the_run_before(
    runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path
) -> None:
    _script(runtime)
    runtime_status = status(ctr("app", C, "c1", restarts=1), ctr("app", E, "c0", exit_code=1))
    await _manager(client, tmp_path).sync_pod(pod(), runtime_status)
    assert _created_attempts(runtime) == [1]  # upstream: 2, counting the run that never happened


async def test_an_old_sandbox_is_stopped_then_removed_after_its_containers(
    runtime: ScriptedRuntime, client: CRIClient, tmp_path: Path
) -> None:
    runtime_status = status(
        ctr("app", R, "c1"), ctr("app", C, "c0", sb="s0"), sandboxes=(S1, sandbox("s0", ready=False))
    )
    result = await _manager(client, tmp_path).sync_pod(pod(), runtime_status)
    assert result.changed
    calls = [(c.rpc, c.request) for c in runtime.calls if c.rpc.startswith(("Remove", "Stop"))]
    assert [rpc for rpc, _ in calls] == ["RemoveContainer", "StopPodSandbox", "RemovePodSandbox"]
    assert [getattr(r, "container_id", "") or getattr(r, "pod_sandbox_id", "") for _, r in calls] == ["c0", "s0", "s0"]
    assert runtime.calls_of("CreateContainer") == []
