from __future__ import annotations

from typing import Any

import pytest

from cri.v1 import api_pb2
from nodeagent.kuberuntime import labels as kl
from nodeagent.kuberuntime.actions import (
    ContainerState,
    ContainerStatus,
    ContainerToKill,
    PodActions,
    RuntimePodStatus,
    SandboxState,
    SandboxStatus,
    compute_pod_actions,
    container_from_cri,
    from_pod_status,
    group_by_pod,
    next_restart_count,
    pod_sandbox_changed,
    runtime_pod_status,
    sandbox_from_cri,
)
from nodeagent.kuberuntime.backoff import Backoff, container_backoff_key
from nodeagent.kuberuntime.hashing import hash_container
from pleg.status import ContainerRecord, PodStatus, make_pod_status

NS = 1_000_000_000
NOW = 10_000.0
APP: dict[str, Any] = {"name": "app", "image": "busybox"}
SIDE: dict[str, Any] = {"name": "side", "image": "busybox", "restartPolicy": "Always"}
INIT1: dict[str, Any] = {"name": "init1", "image": "busybox"}
INIT2: dict[str, Any] = {"name": "init2", "image": "busybox"}
SPECS = {c["name"]: c for c in (APP, SIDE, INIT1, INIT2)}


def pod(
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    restart_policy: str = "Always",
    **extra: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "metadata": {"name": "web", "namespace": "default", "uid": "u-1"},
        "spec": {"containers": containers or [APP], "initContainers": init or [], "restartPolicy": restart_policy},
    }
    if "status" in extra:
        out["status"] = extra.pop("status")
    out["spec"].update(extra)
    return out


READY = SandboxStatus(id="s1", state=SandboxState.READY, attempt=0, created_at=1, ip="10.0.0.2", host_network=False)


def ctr(
    name: str,
    state: ContainerState,
    exit_code: int = 0,
    *,
    cid: str = "",
    hash_: str | None = None,
    finished: float = 0,
) -> ContainerStatus:
    return ContainerStatus(
        id=cid or f"id-{name}",
        name=name,
        state=state,
        exit_code=exit_code,
        hash=hash_container(SPECS[name]) if hash_ is None else hash_,
        finished_at=int(finished * NS),
    )


def status(*containers: ContainerStatus, sandboxes: tuple[SandboxStatus, ...] = (READY,)) -> RuntimePodStatus:
    return RuntimePodStatus(uid="u-1", name="web", namespace="default", sandboxes=sandboxes, containers=containers)


R, E, U, C = ContainerState.RUNNING, ContainerState.EXITED, ContainerState.UNKNOWN, ContainerState.CREATED


def kill(name: str, message: str, reason: str, cid: str = "") -> ContainerToKill:
    return ContainerToKill(cid or f"id-{name}", name, message, reason)


CASES: list[tuple[str, dict[str, Any], RuntimePodStatus, PodActions]] = [
    (
        "fresh pod",
        pod(),
        RuntimePodStatus(uid="u-1"),
        PodActions(kill_pod=True, create_sandbox=True, containers_to_start=("app",)),
    ),
    (
        "fresh pod with init containers starts the first",
        pod(init=[INIT1, INIT2]),
        RuntimePodStatus(uid="u-1"),
        PodActions(kill_pod=True, create_sandbox=True, init_containers_to_start=("init1",)),
    ),
    ("running and unchanged: nothing", pod(), status(ctr("app", R)), PodActions(sandbox_id="s1")),
    (
        "sandbox not ready: recreate with next attempt",
        pod(),
        status(ctr("app", R), sandboxes=(SandboxStatus(id="s1", state=SandboxState.NOT_READY, attempt=3),)),
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="s1", attempt=4, containers_to_start=("app",)),
    ),
    (
        "sandbox network namespace changed",
        pod(hostNetwork=True),
        status(ctr("app", R)),
        PodActions(kill_pod=True, create_sandbox=True, attempt=1, containers_to_start=("app",)),
    ),
    (
        "sandbox without IP",
        pod(),
        status(ctr("app", R), sandboxes=(SandboxStatus(id="s1", state=SandboxState.READY, host_network=False),)),
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="s1", attempt=1, containers_to_start=("app",)),
    ),
    (
        "two ready sandboxes",
        pod(),
        status(ctr("app", R), sandboxes=(READY, SandboxStatus(id="s0", state=SandboxState.READY))),
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="s1", attempt=1, containers_to_start=("app",)),
    ),
    (
        "Never: sandbox died after containers ran, no new sandbox",
        pod(restart_policy="Never"),
        status(ctr("app", E, 1), sandboxes=(SandboxStatus(id="s1", state=SandboxState.NOT_READY),)),
        PodActions(kill_pod=True, sandbox_id="s1", attempt=1),
    ),
    (
        "OnFailure: sandbox died, succeeded containers are not started again",
        pod(containers=[APP, {"name": "b", "image": "x"}], restart_policy="OnFailure"),
        status(ctr("app", E, 0), sandboxes=(SandboxStatus(id="s1", state=SandboxState.NOT_READY),)),
        PodActions(kill_pod=True, create_sandbox=True, sandbox_id="s1", attempt=1, containers_to_start=("b",)),
    ),
    (
        "OnFailure: sandbox died and all succeeded, nothing to create",
        pod(restart_policy="OnFailure"),
        status(ctr("app", E, 0), sandboxes=(SandboxStatus(id="s1", state=SandboxState.NOT_READY),)),
        PodActions(kill_pod=True, sandbox_id="s1", attempt=1),
    ),
    (
        "Always restarts an exited container",
        pod(containers=[APP, SIDE | {"name": "other", "restartPolicy": None}]),
        status(ctr("app", E, 0), ContainerStatus(id="o", name="other", state=R)),
        PodActions(sandbox_id="s1", containers_to_start=("app",)),
    ),
    (
        "OnFailure restarts a failed container",
        pod(restart_policy="OnFailure"),
        status(ctr("app", E, 2)),
        PodActions(sandbox_id="s1", containers_to_start=("app",)),
    ),
    (
        "OnFailure: all succeeded, kill the pod",
        pod(restart_policy="OnFailure"),
        status(ctr("app", E, 0)),
        PodActions(kill_pod=True, sandbox_id="s1"),
    ),
    (
        "Never: exited container stays, pod killed",
        pod(restart_policy="Never"),
        status(ctr("app", E, 1)),
        PodActions(kill_pod=True, sandbox_id="s1"),
    ),
    (
        "unknown state: kill then start",
        pod(restart_policy="Never"),
        status(ctr("app", U)),
        PodActions(
            sandbox_id="s1",
            containers_to_start=("app",),
            containers_to_kill=(
                kill("app", 'Container is in "unknown" state, try killing it before restart', "UnknownState"),
            ),
        ),
    ),
    (
        "spec hash changed: restart even under Never",
        pod(restart_policy="Never"),
        status(ctr("app", R, hash_="old")),
        PodActions(
            sandbox_id="s1",
            containers_to_start=("app",),
            containers_to_kill=(kill("app", "Container app definition changed, will be restarted", "SpecChanged"),),
        ),
    ),
    (
        "no hash annotation: adopted as is",
        pod(),
        status(ctr("app", R, hash_="")),
        PodActions(sandbox_id="s1"),
    ),
    (
        "init: first still running, wait",
        pod(init=[INIT1, INIT2]),
        status(ctr("init1", R)),
        PodActions(sandbox_id="s1"),
    ),
    (
        "init: first succeeded, start second",
        pod(init=[INIT1, INIT2]),
        status(ctr("init1", E, 0)),
        PodActions(sandbox_id="s1", init_containers_to_start=("init2",)),
    ),
    (
        "init: all succeeded, start containers",
        pod(init=[INIT1, INIT2]),
        status(ctr("init1", E, 0), ctr("init2", E, 0)),
        PodActions(sandbox_id="s1", containers_to_start=("app",)),
    ),
    (
        "init: failed is restarted",
        pod(init=[INIT1, INIT2]),
        status(ctr("init1", E, 1)),
        PodActions(sandbox_id="s1", init_containers_to_start=("init1",)),
    ),
    (
        "init: failed under Never kills the pod",
        pod(init=[INIT1, INIT2], restart_policy="Never"),
        status(ctr("init1", E, 1)),
        PodActions(kill_pod=True, sandbox_id="s1"),
    ),
    (
        "init: removed after the pod initialized is not run again",
        pod(init=[INIT1]),
        status(ctr("app", R)),
        PodActions(sandbox_id="s1"),
    ),
    (
        "sidecar: started before the next init container",
        pod(init=[SIDE, INIT1]),
        status(),
        PodActions(sandbox_id="s1", init_containers_to_start=("side",)),
    ),
    (
        "sidecar running: next init container",
        pod(init=[SIDE, INIT1]),
        status(ctr("side", R)),
        PodActions(sandbox_id="s1", init_containers_to_start=("init1",)),
    ),
    (
        "sidecar running, init done: start app",
        pod(init=[SIDE, INIT1]),
        status(ctr("side", R), ctr("init1", E, 0)),
        PodActions(sandbox_id="s1", containers_to_start=("app",)),
    ),
    (
        "sidecar exited after init: restarted alongside app",
        pod(init=[SIDE], restart_policy="Never"),
        status(ctr("side", E, 1), ctr("app", R)),
        PodActions(sandbox_id="s1", init_containers_to_start=("side",)),
    ),
    (
        "sidecar spec changed: kill and restart",
        pod(init=[SIDE]),
        status(ctr("side", R, hash_="old"), ctr("app", R)),
        PodActions(
            sandbox_id="s1",
            init_containers_to_start=("side",),
            containers_to_kill=(kill("side", "Container side definition changed, will be restarted", "SpecChanged"),),
        ),
    ),
    (
        "only sidecars left: the pod is killed",
        pod(init=[SIDE], restart_policy="OnFailure"),
        status(ctr("side", E, 1), ctr("app", E, 0)),
        PodActions(kill_pod=True, sandbox_id="s1"),
    ),
    (
        "succeeded pod: kill what runs, start nothing",
        pod(status={"phase": "Succeeded"}),
        status(ctr("app", E, 1)),
        PodActions(kill_pod=True),
    ),
    (
        "failed pod with nothing left: no actions",
        pod(status={"phase": "Failed"}),
        RuntimePodStatus(uid="u-1"),
        PodActions(),
    ),
]


@pytest.mark.parametrize(("pod_", "runtime", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_compute_pod_actions(pod_: dict[str, Any], runtime: RuntimePodStatus, expected: PodActions) -> None:
    assert compute_pod_actions(pod_, runtime, now=NOW, backoff=Backoff()) == expected


@pytest.mark.parametrize(
    ("liveness", "startup", "policy", "expected"),
    [
        (
            {"id-app"},
            set(),
            "Always",
            PodActions(
                sandbox_id="s1",
                containers_to_start=("app",),
                containers_to_kill=(
                    kill("app", "Container app failed liveness probe, will be restarted", "LivenessProbe"),
                ),
            ),
        ),
        (
            set(),
            {"id-app"},
            "Never",
            PodActions(
                kill_pod=True,
                sandbox_id="s1",
                containers_to_kill=(kill("app", "Container app failed startup probe", "StartupProbe"),),
            ),
        ),
    ],
)
def test_probe_failures(liveness: set[str], startup: set[str], policy: str, expected: PodActions) -> None:
    actions = compute_pod_actions(
        pod(restart_policy=policy),
        status(ctr("app", R)),
        now=NOW,
        backoff=Backoff(),
        liveness_failed=frozenset(liveness),
        startup_failed=frozenset(startup),
    )
    assert actions == expected


@pytest.mark.parametrize(
    ("probes", "liveness", "startup", "grace"),
    [
        # The failed probe's own terminationGracePeriodSeconds overrides the pod's.
        ({"livenessProbe": {"terminationGracePeriodSeconds": 7}}, {"id-app"}, set(), 7),
        ({"startupProbe": {"terminationGracePeriodSeconds": 0}}, set(), {"id-app"}, 0),
        # Only the probe that failed counts: a liveness kill does not take the startup probe's grace.
        ({"startupProbe": {"terminationGracePeriodSeconds": 9}}, {"id-app"}, set(), None),
        # Without one, the pod's grace applies (None here; the runtime manager reads the pod's).
        ({"livenessProbe": {"periodSeconds": 1}}, {"id-app"}, set(), None),
    ],
    ids=["liveness-own-grace", "startup-own-grace", "other-probe-grace-ignored", "no-probe-grace"],
)
def test_probe_kill_carries_the_probe_grace(
    probes: dict[str, Any], liveness: set[str], startup: set[str], grace: int | None
) -> None:
    app = {**APP, **probes}
    actions = compute_pod_actions(
        pod(containers=[app]),
        status(ctr("app", R, hash_=hash_container(app))),
        now=NOW,
        backoff=Backoff(),
        liveness_failed=frozenset(liveness),
        startup_failed=frozenset(startup),
    )
    [killed] = actions.containers_to_kill
    assert killed.grace_period == grace
    assert actions.containers_to_start == ("app",)


@pytest.mark.parametrize(
    ("passed", "expected"),
    [
        (None, PodActions(sandbox_id="s1", init_containers_to_start=("init1",))),  # no prober: started when running
        (frozenset(), PodActions(sandbox_id="s1")),  # its startup probe has not succeeded: init1 waits
        (frozenset({"id-side"}), PodActions(sandbox_id="s1", init_containers_to_start=("init1",))),
    ],
    ids=["no prober", "startup pending", "startup passed"],
)
def test_a_sidecar_with_a_startup_probe_holds_the_next_container(
    passed: frozenset[str] | None, expected: PodActions
) -> None:
    """As upstream's computeInitContainerActions (found by the differential corpus: the main container started while
    the sidecar's startup probe still failed)."""
    side = {**SIDE, "startupProbe": {"exec": {"command": ["true"]}}}
    running = ctr("side", R, hash_=hash_container(side))
    actions = compute_pod_actions(
        pod(init=[side, INIT1]), status(running), now=NOW, backoff=Backoff(), startup_passed=passed
    )
    assert actions == expected
    # Once the pod initialized (a regular container ran in this sandbox), a pending startup probe holds nothing.
    done = compute_pod_actions(
        pod(init=[side, INIT1]),
        status(running, ctr("init1", E, 0), ctr("app", R)),
        now=NOW,
        backoff=Backoff(),
        startup_passed=frozenset(),
    )
    assert done == PodActions(sandbox_id="s1")


def test_crash_loop_backoff_defers_start() -> None:
    backoff = Backoff(clock=lambda: NOW)
    runtime = status(ctr("app", E, 1, finished=NOW - 5))
    # First failure: no entry, restart at once; the caller then records it.
    assert compute_pod_actions(pod(), runtime, now=NOW, backoff=backoff).containers_to_start == ("app",)
    key = container_backoff_key("u-1", pod()["spec"]["containers"][0])
    backoff.next(key, NOW)
    backoff.next(key, NOW)  # second failure: 20 s
    actions = compute_pod_actions(pod(), runtime, now=NOW, backoff=backoff)
    assert actions.containers_to_start == ()
    assert not actions.kill_pod
    (wait,) = actions.backoff
    assert (wait.name, wait.reason, wait.remaining) == ("app", "CrashLoopBackOff", 15.0)
    assert wait.message == "back-off 20s restarting failed container=app pod=web_default(u-1)"
    later = compute_pod_actions(pod(), runtime, now=NOW + 16, backoff=backoff)
    assert later.containers_to_start == ("app",)
    assert later.backoff == ()


def test_a_new_image_does_not_wait_out_the_old_specs_back_off() -> None:
    # As upstream (the back-off key holds the container's spec hash): the e2e spec "back-off timer reset on image
    # update" replaces a crash-looping container's image and expects a restart within seconds, not minutes.
    backoff = Backoff(clock=lambda: NOW)
    runtime = status(ctr("app", E, 1, finished=NOW - 5))
    key = container_backoff_key("u-1", pod()["spec"]["containers"][0])
    for _ in range(5):
        backoff.next(key, NOW)
    assert compute_pod_actions(pod(), runtime, now=NOW, backoff=backoff).containers_to_start == ()
    updated = pod()
    updated["spec"]["containers"][0]["image"] = "registry.test/other:2"
    actions = compute_pod_actions(updated, runtime, now=NOW, backoff=backoff)
    assert "app" in actions.containers_to_start
    assert actions.backoff == ()


def test_pod_sandbox_changed_none_known_network() -> None:
    listed = SandboxStatus(id="s1", state=SandboxState.READY, attempt=2)  # from ListPodSandbox: no IP, no netns
    assert pod_sandbox_changed(pod(), status(sandboxes=(listed,))) == (False, 2, "s1")


def test_builders_from_cri() -> None:
    the_pod = pod()
    labels = kl.container_labels(the_pod, APP)
    annotations = kl.container_annotations(the_pod, APP, container_hash="h1", restart_count=4)
    listed = api_pb2.Container(
        id="c1",
        pod_sandbox_id="s1",
        metadata=api_pb2.ContainerMetadata(name="app", attempt=4),
        state=api_pb2.CONTAINER_RUNNING,
        created_at=5,
        labels=labels,
        annotations=annotations,
    )
    old = api_pb2.Container(id="c0", pod_sandbox_id="s1", state=api_pb2.CONTAINER_EXITED, created_at=1, labels=labels)
    foreign = api_pb2.Container(id="x", metadata=api_pb2.ContainerMetadata(name="x"))
    sandbox = api_pb2.PodSandbox(
        id="s1",
        metadata=api_pb2.PodSandboxMetadata(name="web", uid="u-1", namespace="default", attempt=1),
        state=api_pb2.SANDBOX_READY,
        created_at=3,
        labels=kl.sandbox_labels(the_pod),
    )
    pods = group_by_pod([sandbox, api_pb2.PodSandbox(id="foreign")], [listed, old, foreign])
    assert list(pods) == ["u-1"]
    rp = pods["u-1"]
    assert (rp.name, rp.namespace) == ("web", "default")
    assert rp.sandboxes == (SandboxStatus(id="s1", state=SandboxState.READY, attempt=1, created_at=3),)
    assert [c.id for c in rp.containers] == ["c1", "c0"]  # newest first
    newest = rp.find_container("app")
    assert newest == ContainerStatus(
        id="c1", name="app", state=R, hash="h1", restart_count=4, created_at=5, pod_sandbox_id="s1"
    )
    assert next_restart_count(rp, "app") == 5
    assert next_restart_count(rp, "other") == 0
    assert container_from_cri(foreign) == ContainerStatus(id="x", name="x", state=C)


def test_builders_from_cri_statuses() -> None:
    sandbox_status = api_pb2.PodSandboxStatus(
        id="s1",
        metadata=api_pb2.PodSandboxMetadata(attempt=2),
        state=api_pb2.SANDBOX_NOTREADY,
        network=api_pb2.PodSandboxNetworkStatus(ip="10.0.0.2", additional_ips=[api_pb2.PodIP(ip="fd00::2")]),
    )
    sandbox_status.linux.namespaces.options.network = api_pb2.NODE
    assert sandbox_from_cri(sandbox_status) == SandboxStatus(
        id="s1",
        state=SandboxState.NOT_READY,
        attempt=2,
        ip="10.0.0.2",
        additional_ips=("fd00::2",),
        host_network=True,
    )
    cs = api_pb2.ContainerStatus(
        id="c1",
        metadata=api_pb2.ContainerMetadata(name="app", attempt=1),
        state=api_pb2.CONTAINER_EXITED,
        exit_code=137,
        started_at=10,
        finished_at=20,
        reason="OOMKilled",
        message="boom",
        image=api_pb2.ImageSpec(image="busybox"),
        image_ref="sha256:1",
    )
    assert container_from_cri(cs, pod_sandbox_id="s1") == ContainerStatus(
        id="c1",
        name="app",
        state=E,
        exit_code=137,
        restart_count=1,
        started_at=10,
        finished_at=20,
        reason="OOMKilled",
        message="boom",
        image="busybox",
        image_ref="sha256:1",
        pod_sandbox_id="s1",
    )
    rp = runtime_pod_status(
        "u-1",
        sandboxes=[SandboxStatus(id="a", state=SandboxState.READY, created_at=1), sandbox_from_cri(sandbox_status)],
        containers=[],
    )
    assert [s.id for s in rp.sandboxes] == ["a", "s1"]


def test_from_pod_status_converts_what_the_pleg_cached() -> None:
    the_pod = pod()
    labels = kl.container_labels(the_pod, APP)
    annotations = kl.container_annotations(the_pod, APP, container_hash="h1", restart_count=2)
    cached = make_pod_status(
        "u-1",
        name="web",
        namespace="default",
        sandboxes=[
            api_pb2.PodSandboxStatus(id="s0", state=api_pb2.SANDBOX_NOTREADY, created_at=1),
            api_pb2.PodSandboxStatus(
                id="s1",
                state=api_pb2.SANDBOX_READY,
                created_at=2,
                metadata=api_pb2.PodSandboxMetadata(attempt=1),
                network=api_pb2.PodSandboxNetworkStatus(ip="198.18.0.3"),
            ),
        ],
        containers=[
            ContainerRecord(
                "s1",
                api_pb2.ContainerStatus(
                    id="c1",
                    state=api_pb2.CONTAINER_EXITED,
                    exit_code=1,
                    created_at=5,
                    labels=labels,
                    annotations=annotations,
                ),
            )
        ],
    )
    converted = from_pod_status(cached)
    assert (converted.uid, converted.name, converted.namespace, converted.ips) == (
        "u-1",
        "web",
        "default",
        ("198.18.0.3",),
    )
    assert [(s.id, s.state, s.attempt) for s in converted.sandboxes] == [
        ("s1", SandboxState.READY, 1),
        ("s0", SandboxState.NOT_READY, 0),
    ]
    assert converted.containers == (
        ContainerStatus(
            id="c1", name="app", state=E, exit_code=1, hash="h1", restart_count=2, created_at=5, pod_sandbox_id="s1"
        ),
    )
    assert from_pod_status(PodStatus(uid="u-2")) == RuntimePodStatus(uid="u-2")
