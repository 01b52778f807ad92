"""The status manager against a scripted apiserver (httpx.MockTransport behind a real KubeClient) and a fake clock."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from nodeagent.kube.client import KubeClient
from nodeagent.status.manager import StatusManager
from tests.unit.fakeclock import FakeClock
from tests.unit.kube.scripted import Script, status

PATH = "/api/v1/namespaces/ns/pods/p/status"
POD_PATH = "/api/v1/namespaces/ns/pods/p"


def pod(uid: str = "u1", name: str = "p", api_status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {"containers": [{"name": "a", "image": "img"}]},
        "status": api_status if api_status is not None else {"phase": "Pending"},
    }


def pod_status(
    phase: str = "Running", *, restarts: int = 0, ready: str = "True", t: str = "2024-05-01T12:00:00Z"
) -> Any:
    return {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": t}],
        "containerStatuses": [{"name": "a", "ready": ready == "True", "restartCount": restarts, "image": "img"}],
    }


MERGE_KEYS = {"conditions": "type", "podIPs": "ip", "hostIPs": "ip"}
ORDER = "$setElementOrder/"


def strategic(target: Any, patch: Any, *, top: bool = False) -> Any:
    """A strategic merge patch as the apiserver applies it to a v1.PodStatus: maps merge (null deletes), the keyed
    lists merge element by element (`$patch: delete` removes one, `$setElementOrder` orders them), others replace."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith(ORDER):
            continue
        merge_key = MERGE_KEYS.get(key) if top else None
        if value is None:
            out.pop(key, None)
        elif merge_key is not None and isinstance(value, list):
            out[key] = keyed(out.get(key) or [], value, merge_key)
        else:
            out[key] = strategic(out.get(key), value)
    for key, order in patch.items():
        if key.startswith(ORDER) and top:
            field = key[len(ORDER) :]
            merge_key = MERGE_KEYS[field]
            rank = {item[merge_key]: i for i, item in enumerate(order)}
            out[field] = sorted(out.get(field) or [], key=lambda item: rank.get(item[merge_key], len(rank)))
    return out


def keyed(items: list[Any], patch: list[Any], key: str) -> list[Any]:
    out = [dict(item) for item in items]
    for element in patch:
        index = next((i for i, item in enumerate(out) if item[key] == element[key]), None)
        if element.get("$patch") == "delete":
            if index is not None:
                del out[index]
        elif index is None:
            out.append(dict(element))
        else:
            out[index] = strategic(out[index], element)
    return out


def apiserver(stored: dict[str, Any]) -> Callable[[httpx.Request], httpx.Response]:
    """A strategic merge PATCH of pods/status applied to `stored`, answered with the whole pod, as the apiserver."""

    def reply(request: httpx.Request) -> httpx.Response:
        assert request.headers["content-type"] == "application/strategic-merge-patch+json"
        patch = json.loads(request.content)
        stored["status"] = strategic(stored.get("status") or {}, patch["status"], top=True)
        return httpx.Response(200, json=stored)

    return reply


def body(request: httpx.Request) -> Any:
    return json.loads(request.content)


@pytest.fixture
async def script() -> AsyncIterator[Script]:
    yield Script()


@pytest.fixture
async def client(script: Script) -> AsyncIterator[KubeClient]:
    async with script.client() as c:
        yield c


@pytest.fixture
def manager(client: KubeClient) -> StatusManager:
    return StatusManager(client, clock=FakeClock())


async def test_a_new_status_is_patched_once_with_the_uid_precondition(script: Script, manager: StatusManager) -> None:
    stored = pod()
    script.add("PATCH", PATH, apiserver(stored))
    manager.set_pod_status(pod(), pod_status())
    await manager.sync_once()
    await manager.sync_once()

    assert manager.patches_sent == 1
    [request] = script.requests
    assert request.headers["content-type"] == "application/strategic-merge-patch+json"
    assert body(request) == {"metadata": {"uid": "u1"}, "status": pod_status()}
    assert stored["status"] == pod_status()


async def test_the_patch_carries_only_what_changed_since_the_apiservers_answer(
    script: Script, manager: StatusManager
) -> None:
    stored = pod()
    script.add("PATCH", PATH, apiserver(stored)).add("PATCH", PATH, apiserver(stored))
    manager.set_pod_status(pod(), pod_status(ready="False"))
    await manager.sync_once()
    manager.set_pod_status(pod(), pod_status(ready="True", t="2024-05-01T12:01:00Z"))
    await manager.sync_once()

    second = body(script.requests[1])
    assert second["metadata"] == {"uid": "u1"}
    assert set(second["status"]) == {"$setElementOrder/conditions", "conditions", "containerStatuses"}
    # Only the condition's own changes, named by its type: a strategic merge patch merges conditions by type.
    assert second["status"]["conditions"] == [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T12:01:00Z"}
    ]
    assert stored["status"] == pod_status(ready="True", t="2024-05-01T12:01:00Z")
    assert manager.patches_sent == 2


@pytest.mark.parametrize(
    "again",
    [
        pytest.param(pod_status(), id="identical"),
        pytest.param(pod_status(t="2024-05-01T13:00:00Z"), id="only-condition-times-differ"),
    ],
)
async def test_the_same_status_again_is_not_patched(script: Script, manager: StatusManager, again: Any) -> None:
    script.add("PATCH", PATH, apiserver(pod()))
    manager.set_pod_status(pod(), pod_status())
    await manager.sync_once()
    manager.set_pod_status(pod(), again)
    await manager.sync_once()

    assert manager.patches_sent == 1
    assert len(script.requests) == 1


async def test_a_status_the_apiserver_already_has_is_not_patched(script: Script, manager: StatusManager) -> None:
    manager.set_pod_status(pod(api_status=pod_status()), pod_status())
    await manager.sync_once()
    assert manager.patches_sent == 0
    assert script.requests == []


@pytest.mark.parametrize(
    ("first", "then"),
    [
        pytest.param(pod_status("Succeeded", ready="False"), pod_status("Running"), id="running-after-succeeded"),
        pytest.param(pod_status("Failed", ready="False"), pod_status("Pending"), id="pending-after-failed"),
    ],
)
async def test_a_stale_status_is_refused(script: Script, manager: StatusManager, first: Any, then: Any) -> None:
    script.add("PATCH", PATH, apiserver(pod()))
    manager.set_pod_status(pod(), first)
    await manager.sync_once()
    manager.set_pod_status(pod(), then)
    await manager.sync_once()

    assert manager.get_pod_status("u1") == first
    assert manager.patches_sent == 1


async def test_a_lower_restart_count_is_accepted_as_upstream_does(script: Script, manager: StatusManager) -> None:
    """After the runtime lost its containers (a reboot, an emulated node's restart) the interim status counts the
    vanished container as a restart (1) and the new container's count comes from its log directory (0 when it has
    none): upstream's status manager takes it, and a refusal left the pod waiting for good."""
    script.add("PATCH", PATH, apiserver(pod()))
    script.add("PATCH", PATH, apiserver(pod()))
    manager.set_pod_status(pod(), pod_status(restarts=1))
    await manager.sync_once()
    manager.set_pod_status(pod(), pod_status(restarts=0))
    await manager.sync_once()

    assert manager.get_pod_status("u1") == pod_status(restarts=0)
    assert manager.patches_sent == 2


async def test_a_status_older_than_the_apiservers_is_refused_before_anything_is_cached(
    script: Script, manager: StatusManager
) -> None:
    manager.set_pod_status(pod(api_status=pod_status("Succeeded", ready="False")), pod_status("Running"))
    await manager.sync_once()
    assert manager.get_pod_status("u1") is None
    assert script.requests == []


async def test_not_found_drops_the_pod_from_syncing(script: Script, manager: StatusManager) -> None:
    script.add("PATCH", PATH, status(404, "NotFound", 'pods "p" not found'))
    manager.set_pod_status(pod(), pod_status())
    await manager.sync_once()
    manager.set_pod_status(pod(), pod_status(ready="False"))
    await manager.sync_once()

    assert len(script.requests) == 1
    assert manager.patches_sent == 1
    # Still readable: the worker that terminates the pod reads what it last published.
    assert manager.get_pod_status("u1") == pod_status(ready="False")


@pytest.mark.parametrize(
    "refusal",
    [
        # What the real apiserver answers to a merge patch whose metadata.uid is not the object's.
        pytest.param(status(422, "Invalid", 'metadata.uid: Invalid value: "u1": field is immutable'), id="invalid"),
        pytest.param(status(409, "Conflict", "Precondition failed: UID in precondition: u1"), id="conflict"),
    ],
)
async def test_a_refusal_from_a_recreated_pod_stops_the_old_uids_status(
    script: Script, manager: StatusManager, refusal: httpx.Response
) -> None:
    script.add("PATCH", PATH, refusal)
    script.add("GET", POD_PATH, httpx.Response(200, json=pod(uid="u2")))
    manager.set_pod_status(pod(), pod_status())
    await manager.sync_once()
    await manager.sync_once()

    assert [r.method for r in script.requests] == ["PATCH", "GET"]
    assert manager.patches_sent == 1


async def test_a_conflict_reads_the_pod_and_retries_from_its_status(script: Script, manager: StatusManager) -> None:
    current = pod(api_status={"phase": "Pending", "message": "set by someone else"})
    script.add("PATCH", PATH, status(409, "Conflict", "the object has been modified"))
    script.add("GET", POD_PATH, httpx.Response(200, json=copy.deepcopy(current)))
    script.add("PATCH", PATH, apiserver(current))
    manager.set_pod_status(pod(), pod_status())
    await manager.sync_once()
    await manager.sync_once()

    assert [r.method for r in script.requests] == ["PATCH", "GET", "PATCH"]
    assert body(script.requests[2])["status"]["message"] is None  # built from the GET's status
    assert current["status"] == pod_status()


async def test_an_unavailable_apiserver_is_retried_next_round(script: Script, manager: StatusManager) -> None:
    script.add("PATCH", PATH, httpx.ConnectError("connection refused"))
    script.add("PATCH", PATH, apiserver(pod()))
    manager.set_pod_status(pod(), pod_status())
    await manager.sync_once()
    await manager.sync_once()
    await manager.sync_once()

    assert manager.patches_sent == 2
    assert body(script.requests[0]) == body(script.requests[1])


async def test_one_pods_failure_does_not_block_the_others(script: Script, manager: StatusManager) -> None:
    script.add("PATCH", PATH, httpx.ConnectError("connection refused"))
    script.add("PATCH", "/api/v1/namespaces/ns/pods/q/status", apiserver(pod("u2", "q")))
    manager.set_pod_status(pod(), pod_status())
    manager.set_pod_status(pod("u2", "q"), pod_status())
    await manager.sync_once()

    assert [r.url.path for r in script.requests] == [PATH, "/api/v1/namespaces/ns/pods/q/status"]


async def test_remove_orphans_forgets_unknown_pods(script: Script, manager: StatusManager) -> None:
    manager.set_pod_status(pod(), pod_status())
    manager.set_pod_status(pod("u2", "q"), pod_status())
    manager.remove_orphans({"u2"})
    script.add("PATCH", "/api/v1/namespaces/ns/pods/q/status", apiserver(pod("u2", "q")))
    await manager.sync_once()

    assert manager.get_pod_status("u1") is None
    assert manager.get_pod_status("u2") == pod_status()
    assert len(script.requests) == 1


async def test_get_pod_status_returns_a_copy(manager: StatusManager) -> None:
    manager.set_pod_status(pod(), pod_status())
    got = manager.get_pod_status("u1")
    assert got is not None
    got["phase"] = "Failed"
    assert manager.get_pod_status("u1") == pod_status()


async def test_without_a_client_statuses_are_only_kept() -> None:
    clock = FakeClock()
    manager = StatusManager(None, clock=clock)
    task = asyncio.create_task(manager.run())
    try:
        manager.set_pod_status(pod(), pod_status())
        await clock.advance(30)
        assert not task.done()
        assert manager.get_pod_status("u1") == pod_status()
        assert manager.patches_sent == 0
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_run_sends_when_woken_and_retries_every_sync_period(script: Script, client: KubeClient) -> None:
    clock = FakeClock()
    manager = StatusManager(client, clock=clock, sync_period=10.0)
    stored = pod()
    script.add("PATCH", PATH, apiserver(stored))
    script.add("PATCH", PATH, httpx.ConnectError("connection refused"))
    script.add("PATCH", PATH, apiserver(stored))
    task = asyncio.create_task(manager.run())
    try:
        manager.set_pod_status(pod(), pod_status(ready="False"))
        await clock.advance(0)  # woken: sent at once, no time passes
        assert manager.patches_sent == 1

        manager.set_pod_status(pod(), pod_status())
        await clock.advance(0)  # woken, but the apiserver is unreachable
        assert manager.patches_sent == 2
        await clock.advance(9)
        assert manager.patches_sent == 2
        await clock.advance(1)  # the periodic round retries
        assert manager.patches_sent == 3
        assert stored["status"] == pod_status()

        await clock.advance(30)  # nothing changed: nothing sent
        assert manager.patches_sent == 3
        assert not script.steps
        assert not task.done()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# --- a static pod's status goes to its mirror pod -----------------------------------------------------------------


async def test_a_static_pods_status_waits_for_its_mirror_and_follows_it_when_recreated(
    script: Script, client: KubeClient
) -> None:
    target: dict[str, str | None] = {"u1": None}
    manager = StatusManager(client, clock=FakeClock(), pod_api_uid=target.get)
    static = pod(uid="u1", api_status={"phase": "Pending"})

    manager.set_pod_status(static, pod_status())
    await manager.sync_once()
    assert script.requests == []  # no mirror pod yet: nothing to patch

    first = pod(uid="m1")  # the mirror appears, with the apiserver's status for a new pod
    target["u1"] = "m1"
    script.add("GET", POD_PATH, httpx.Response(200, json=first)).add("PATCH", PATH, apiserver(first))
    await manager.sync_once()
    assert body(script.requests[-1]) == {"metadata": {"uid": "m1"}, "status": pod_status()}
    assert first["status"] == pod_status()

    # A user deletes the mirror; the kubelet makes a new one. The same status goes to it, though it did not change.
    target["u1"] = None
    manager.set_pod_status(static, pod_status())
    await manager.sync_once()
    second = pod(uid="m2")
    target["u1"] = "m2"
    manager.set_pod_status(static, pod_status())  # an unchanged status wakes the sync task for the new mirror
    assert manager._wake.is_set()
    script.add("GET", POD_PATH, httpx.Response(200, json=second)).add("PATCH", PATH, apiserver(second))
    await manager.sync_once()
    assert body(script.requests[-1])["metadata"] == {"uid": "m2"}
    assert second["status"] == pod_status()
    assert manager.patches_sent == 2


# --- conditions others own (readiness gates) ----------------------------------------------------------------------

GATE = {"type": "example.com/gate", "status": "True", "lastTransitionTime": "2024-05-01T12:00:30Z"}


async def test_a_gate_set_since_the_last_answer_is_never_undone(script: Script, manager: StatusManager) -> None:
    stored = pod()
    script.add("PATCH", PATH, apiserver(stored)).add("PATCH", PATH, apiserver(stored))
    manager.set_pod_status(pod(), pod_status(ready="False"))
    await manager.sync_once()
    # A user sets the gate through the apiserver; the kubelet's next status was generated before it saw that.
    stored["status"]["conditions"].append(dict(GATE))
    stale_view = {**pod_status(ready="True", t="2024-05-01T12:01:00Z")}
    stale_view["conditions"] = [*stale_view["conditions"], {**GATE, "status": "False"}]
    manager.set_pod_status(pod(), stale_view)
    await manager.sync_once()

    second = body(script.requests[1])["status"]
    assert [c["type"] for c in second["conditions"]] == ["Ready"]  # the gate is not named
    assert stored["status"]["conditions"] == [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2024-05-01T12:01:00Z"},
        GATE,
    ]


async def test_a_change_to_a_foreign_condition_alone_sends_nothing(script: Script, manager: StatusManager) -> None:
    stored = pod()
    script.add("PATCH", PATH, apiserver(stored))
    manager.set_pod_status(pod(), pod_status())
    await manager.sync_once()
    with_gate = pod_status()
    with_gate["conditions"] = [*with_gate["conditions"], GATE]
    manager.set_pod_status(pod(), with_gate)  # a newer view of the pod, the kubelet's part unchanged
    await manager.sync_once()
    assert manager.patches_sent == 1
    assert manager.get_pod_status("u1") == with_gate  # readers see it


# --- observedGeneration, and the terminal phase held while containers may run ------------------------------------


def generation_pod(generation: int | None, api_generation: int | None = None) -> dict[str, Any]:
    out = pod()
    if generation is not None:
        out["metadata"]["generation"] = generation
    if api_generation is not None:
        out["status"]["observedGeneration"] = api_generation
    return out


@pytest.mark.parametrize(
    ("generation", "cached", "expected"),
    [
        pytest.param(2, None, 2, id="the pod's generation"),
        pytest.param(None, None, None, id="no generation: unset"),
        pytest.param(2, 5, 5, id="never below the one already reported"),
    ],
)
async def test_every_status_carries_the_observed_generation(
    manager: StatusManager, generation: int | None, cached: int | None, expected: int | None
) -> None:
    manager.set_pod_status(generation_pod(generation, cached), pod_status())
    kept = manager.get_pod_status("u1")
    assert kept is not None and kept.get("observedGeneration") == expected


async def test_a_new_generation_alone_is_sent(script: Script, manager: StatusManager) -> None:
    stored = generation_pod(1)
    script.add("PATCH", PATH, apiserver(stored))
    script.add("PATCH", PATH, apiserver(stored))
    manager.set_pod_status(generation_pod(1), pod_status())
    await manager.sync_once()
    manager.set_pod_status(generation_pod(2), pod_status())
    await manager.sync_once()
    assert [body(r)["status"] for r in script.requests][1] == {"observedGeneration": 2}


async def test_the_terminal_phase_waits_until_nothing_runs(script: Script, client: KubeClient) -> None:
    could_run = {"u1": True}
    manager = StatusManager(client, clock=FakeClock(), could_have_running_containers=lambda uid: could_run[uid])
    stored = pod()
    for _ in range(3):
        script.add("PATCH", PATH, apiserver(stored))
    manager.set_pod_status(pod(), pod_status())
    await manager.sync_once()
    final = pod_status("Succeeded", ready="False")
    manager.set_pod_status(pod(), final)
    await manager.sync_once()
    # The conditions went out, the phase did not.
    assert stored["status"] == {**final, "phase": "Running"}
    assert manager.get_pod_status("u1") == final
    await manager.sync_once()
    assert manager.patches_sent == 2  # held, but nothing new to send

    could_run["u1"] = False  # the worker finished terminating the pod
    manager.set_pod_status(pod(), final)  # the same status again (upstream's TerminatePod) wakes the sync
    assert manager._wake.is_set()
    await manager.sync_once()
    assert stored["status"] == final
    assert body(script.requests[-1])["status"] == {"phase": "Succeeded"}
    await manager.sync_once()
    assert manager.patches_sent == 3


async def test_a_held_back_failed_phase_may_still_become_succeeded_but_not_once_sent(
    script: Script, client: KubeClient
) -> None:
    """As upstream: a kill's Failed is held back while containers run; the status after the kill, computed from how
    the containers ended (all exited 0), may make it Succeeded. A terminal phase the apiserver shows never changes."""
    could_run = {"u1": True}
    manager = StatusManager(client, clock=FakeClock(), could_have_running_containers=lambda uid: could_run[uid])
    stored = pod()
    for _ in range(3):
        script.add("PATCH", PATH, apiserver(stored))
    manager.set_pod_status(pod(), pod_status())
    await manager.sync_once()
    manager.set_pod_status(pod(), pod_status("Failed", ready="False"))  # the kill's status, while containers run
    await manager.sync_once()
    assert stored["status"]["phase"] == "Running"  # held back
    manager.set_pod_status(pod(), pod_status("Succeeded", ready="False"))
    kept = manager.get_pod_status("u1")
    assert kept is not None and kept["phase"] == "Succeeded"
    could_run["u1"] = False
    await manager.sync_once()
    assert stored["status"]["phase"] == "Succeeded"
    manager.set_pod_status(pod(), pod_status("Failed", ready="False"))  # the apiserver shows Succeeded now
    kept = manager.get_pod_status("u1")
    assert kept is not None and kept["phase"] == "Succeeded"


def test_the_status_view_is_the_kept_status_and_a_new_status_replaces_it(manager: StatusManager) -> None:
    manager.set_pod_status(pod(), pod_status("Pending", ready="False"))
    view = manager.pod_status_view("u1")
    assert view is not None and view == manager.get_pod_status("u1")
    assert view is manager.pod_status_view("u1")  # no copy
    manager.set_pod_status(pod(), pod_status("Running"))
    assert view["phase"] == "Pending"  # the kept status was replaced, not edited under a reader
    assert manager.pod_status_view("u1")["phase"] == "Running"  # type: ignore[index]
    assert manager.pod_status_view("other") is None


async def test_a_status_someone_else_wrote_is_reconciled_every_sync_period(script: Script, client: KubeClient) -> None:
    """Upstream's needsReconcile: the node lifecycle controller marks the pod not Ready while the node is away; once
    the sources show it, the kept status (Ready) is sent again at the next periodic round, though it did not change
    here. A status the sources show that agrees with ours is not sent again, nor is one already compared."""
    clock = FakeClock()
    stored = pod()
    seen: dict[str, Any] = {}
    manager = StatusManager(client, clock=clock, pod_api_status=seen.get)
    script.add("PATCH", PATH, apiserver(stored))
    manager.set_pod_status(pod(), pod_status())
    await manager.sync_once()
    assert manager.patches_sent == 1
    seen["u1"] = copy.deepcopy(stored["status"])  # the sources' view: our own status back
    await clock.advance(10.0)
    await manager.sync_once()
    assert (manager.patches_sent, manager.reconciled) == (1, 0)

    # Someone else writes Ready False; the sources hand over the new status.
    stored["status"] = strategic(stored["status"], {"conditions": [{"type": "Ready", "status": "False"}]}, top=True)
    seen["u1"] = copy.deepcopy(stored["status"])
    await manager.sync_once()  # not yet: the next periodic round is 10 s after the last
    assert manager.reconciled == 0
    script.add("GET", POD_PATH, lambda request: httpx.Response(200, json=stored))
    script.add("PATCH", PATH, apiserver(stored))
    await clock.advance(10.0)
    await manager.sync_once()
    assert (manager.patches_sent, manager.reconciled) == (2, 1)
    assert [c["status"] for c in stored["status"]["conditions"] if c["type"] == "Ready"] == ["True"]

    # The same view again (compared already) and then our status back: nothing more is sent.
    await clock.advance(10.0)
    await manager.sync_once()
    seen["u1"] = copy.deepcopy(stored["status"])
    await clock.advance(10.0)
    await manager.sync_once()
    assert (manager.patches_sent, manager.reconciled) == (2, 1)
