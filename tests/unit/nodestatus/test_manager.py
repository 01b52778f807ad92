"""NodeStatusManager against an apiserver behind httpx.MockTransport, with a fake clock.

Exact request sequences (registration, retries, lease conflicts) use the scripted apiserver; the loops' timing uses
a small stateful one (`Api`), since the status and lease loops interleave their requests.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections import deque
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from nodeagent.config import KubeletConfiguration
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.kubeconfig import ClusterCredentials
from nodeagent.nodestatus import NodeFacts
from nodeagent.nodestatus.manager import NodeStatusManager, _status_patch, condition_events
from nodeagent.version import NODEAGENT_VERSION
from tests.unit.fakeclock import FakeClock
from tests.unit.kube.scripted import SERVER, Script, status

NAME = "n1"
NODE = paths.node(NAME)
NODE_STATUS = paths.node_status(NAME)
LEASES = paths.leases("kube-node-lease")
LEASE = paths.lease("kube-node-lease", NAME)

FACTS = NodeFacts(
    hostname=NAME,
    internal_ip="192.168.1.10",
    machine_id="mid",
    boot_id="bid",
    system_uuid="uuid",
    kernel_version="6.1.0",
    os_image="Debian GNU/Linux 13 (trixie)",
    container_runtime_version="containerd://1.7.24",
    kubelet_version="v1.31.0",
    architecture="amd64",
    operating_system="linux",
    cpu_count=4,
    memory_bytes=8 * 1024**3,
    ephemeral_storage_bytes=100 * 1024**3,
)
CONFIG = KubeletConfiguration()


class Health:
    def __init__(self) -> None:
        self.ready = True
        self.message = ""

    async def __call__(self) -> tuple[bool, str]:
        return self.ready, self.message


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str]] = []

    def __call__(self, type_: str, reason: str, message: str) -> None:
        self.recorded.append((type_, reason, message))

    @property
    def reasons(self) -> list[str]:
        return [reason for _, reason, _ in self.recorded]


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    """JSON merge (nulls delete), except that conditions merge by type as the strategic merge does."""
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif key == "conditions":
            by_type = {c["type"]: c for c in into.get(key, [])}
            by_type.update({c["type"]: c for c in value})
            into[key] = list(by_type.values())
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


class Api:
    """A stateful apiserver for one Node and its Lease, with optimistic concurrency and queued failures."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self.failures: dict[tuple[str, str], deque[httpx.Response]] = {}
        self._rv = 0

    def fail(self, method: str, path: str, *responses: httpx.Response) -> None:
        self.failures.setdefault((method, path), deque()).extend(responses)

    def count(self, method: str, path: str) -> int:
        return sum(1 for m, p, _ in self.requests if (m, p) == (method, path))

    def bodies(self, method: str, path: str) -> list[Any]:
        return [b for m, p, b in self.requests if (m, p) == (method, path)]

    def _stamp(self, obj: dict[str, Any]) -> httpx.Response:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        return httpx.Response(200, json=obj)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        method, path = request.method, request.url.path
        body: Any = json.loads(request.content) if request.content else None
        self.requests.append((method, path, body))
        queued = self.failures.get((method, path))
        if queued:
            return queued.popleft()
        key = path.removesuffix("/status")
        if method == "POST":
            key = f"{path}/{body['metadata']['name']}"
            if key in self.objects:
                return status(409, "AlreadyExists")
            body["metadata"]["uid"] = f"uid-{body['metadata']['name']}"
            self.objects[key] = body
            return self._stamp(body)
        if key not in self.objects:
            return status(404, "NotFound")
        current = self.objects[key]
        if method == "GET":
            return httpx.Response(200, json=current)
        if method == "PATCH":
            _merge(current, body)
            return self._stamp(current)
        if method == "PUT":
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                return status(409, "Conflict", "the object has been modified")
            self.objects[key] = body
            return self._stamp(body)
        raise AssertionError(f"unexpected {method} {path}")

    def client(self) -> KubeClient:
        return KubeClient(ClusterCredentials(server=SERVER), transport=httpx.MockTransport(self))


def _manager(
    client: KubeClient,
    clock: FakeClock,
    health: Health | None = None,
    events: Events | None = None,
    config: KubeletConfiguration = CONFIG,
) -> NodeStatusManager:
    return NodeStatusManager(
        client,
        node_name=NAME,
        config=config,
        facts=FACTS,
        runtime_health=health or Health(),
        clock=clock,
        record_event=events,
        lease_jitter=lambda: 0.0,  # the renew period without its jitter (tests/unit/nodestatus/test_lease.py)
    )


def _created(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    body["metadata"].update(uid="uid-1", resourceVersion="1")
    return httpx.Response(201, json=body)


async def _settle(condition: Any, rounds: int = 200) -> None:
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    yield Api()


# Registration.


async def test_register_creates_the_node_with_conditions_and_records_pressure_events() -> None:
    script = Script().add("POST", paths.nodes(), _created)
    events = Events()
    async with script.client() as client:
        manager = _manager(client, FakeClock(), events=events)
        await manager.register()
    body = json.loads(script.requests[0].content)
    assert body["metadata"]["labels"]["kubernetes.io/hostname"] == NAME
    assert body["metadata"]["annotations"] == {
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        "nodeagent.io/version": NODEAGENT_VERSION,
    }
    ready = {c["type"]: c for c in body["status"]["conditions"]}["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "KubeletReady")
    assert body["status"]["nodeInfo"]["containerRuntimeVersion"] == "containerd://1.7.24"
    node = manager.node()
    assert node is not None and node["metadata"]["uid"] == "uid-1"
    # A new Ready condition records nothing; new pressure conditions do, as setters.go.
    assert events.reasons == ["NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID"]
    assert events.recorded[0] == (
        "Normal",
        "NodeHasSufficientMemory",
        f"Node {NAME} status is now: NodeHasSufficientMemory",
    )


OWNED = {
    "kubernetes.io/hostname": NAME,
    "kubernetes.io/os": "linux",
    "kubernetes.io/arch": "amd64",
    "beta.kubernetes.io/os": "linux",
    "beta.kubernetes.io/arch": "amd64",
}
CMAD = "volumes.kubernetes.io/controller-managed-attach-detach"
VERSION = "nodeagent.io/version"


@pytest.mark.parametrize(
    ("labels", "annotations", "patch"),
    [
        pytest.param(
            {**OWNED, "team": "x"},
            {CMAD: "true", VERSION: NODEAGENT_VERSION, "other": "y"},
            None,
            id="in-sync-no-patch",
        ),
        pytest.param(
            {**OWNED, "kubernetes.io/arch": "arm64", "team": "x"},
            {CMAD: "true", VERSION: NODEAGENT_VERSION},
            {"metadata": {"labels": {"kubernetes.io/arch": "amd64"}}},
            id="wrong-arch-label",
        ),
        pytest.param(
            {"team": "x"},
            {},
            {"metadata": {"labels": OWNED, "annotations": {CMAD: "true", VERSION: NODEAGENT_VERSION}}},
            id="missing-labels-and-annotation",
        ),
        pytest.param(
            OWNED,
            {CMAD: "true", VERSION: "0.0.1"},
            {"metadata": {"annotations": {VERSION: NODEAGENT_VERSION}}},
            id="an-older-agent-registered-it",
        ),
    ],
)
async def test_register_reconciles_an_existing_node(
    labels: dict[str, str], annotations: dict[str, str], patch: dict[str, Any] | None
) -> None:
    existing = {"kind": "Node", "metadata": {"name": NAME, "uid": "old", "labels": labels, "annotations": annotations}}
    script = (
        Script()
        .add("POST", paths.nodes(), status(409, "AlreadyExists"))
        .add("GET", NODE, httpx.Response(200, json=existing))
    )
    if patch is not None:
        script.add("PATCH", NODE, httpx.Response(200, json=existing))
    async with script.client() as client:
        manager = _manager(client, FakeClock())
        await manager.register()
    assert not script.steps
    if patch is not None:
        assert script.requests[-1].headers["Content-Type"] == "application/strategic-merge-patch+json"
        assert json.loads(script.requests[-1].content) == patch
    node = manager.node()
    assert node is not None and node["metadata"]["uid"] == "old"


async def test_register_retries_with_capped_exponential_backoff() -> None:
    clock = FakeClock()
    script = (
        Script()
        .add("POST", paths.nodes(), httpx.ConnectError("refused"))
        .add("POST", paths.nodes(), status(500, "InternalError"))
        .add("POST", paths.nodes(), status(403, "Forbidden"))
        .add("POST", paths.nodes(), _created)
    )
    async with script.client() as client:
        manager = _manager(client, clock)
        task = asyncio.create_task(manager.register())
        await _settle(lambda: len(script.requests) == 1)
        for delay, sent in ((0.1, 2), (0.2, 3), (0.4, 4)):
            await clock.advance(delay - 0.01)
            assert len(script.requests) == sent - 1
            await clock.advance(0.01)
            await _settle(lambda sent=sent: len(script.requests) == sent)
        await task
    assert manager.node() is not None


# The status.


async def test_status_is_posted_on_change_and_otherwise_at_the_report_frequency(api: Api) -> None:
    clock, health, events = FakeClock(), Health(), Events()
    async with api.client() as client:
        manager = _manager(client, clock, health, events)
        await manager.register()
        events.recorded.clear()
        # (seconds to advance, runtime ready, patches sent so far, events recorded on this tick)
        steps: list[tuple[float, bool, int, list[str]]] = [
            (0, True, 1, []),  # first sync always posts
            (10, True, 1, []),  # unchanged: heartbeat only moves in the Lease
            (10, False, 2, ["NodeNotReady"]),
            (10, False, 2, []),
            (10, True, 3, ["NodeReady"]),
            (290, True, 3, []),  # 290s after the last post
            (10, True, 4, []),  # 300s: the report frequency
        ]
        for seconds, ready, patches, reasons in steps:
            await clock.advance(seconds)
            health.ready, health.message = ready, "" if ready else "container runtime is down"
            events.recorded.clear()
            assert await manager.sync_node_status()
            assert (manager.status_patches, events.reasons) == (patches, reasons), (seconds, ready)
            assert api.count("PATCH", NODE_STATUS) == patches
    assert manager.last_report_time == clock.wall()
    node = manager.node()
    assert node is not None
    ready_condition = {c["type"]: c for c in node["status"]["conditions"]}["Ready"]
    assert ready_condition["status"] == "True"


async def test_conditions_someone_else_changed_are_corrected_at_the_next_tick(api: Api) -> None:
    """After missed heartbeats (an apiserver outage) the node lifecycle controller sets every condition Unknown.
    Upstream's kubelet GETs the Node at each tick and compares its status with the one it computes, so it posts
    Ready again at once; comparing only with its own last post, the agent left the node Unknown (NotReady) until
    the report frequency (5 min) passed (found by benchmarks/soak.py, issue 34)."""
    clock, events = FakeClock(), Events()
    async with api.client() as client:
        manager = _manager(client, clock, Health(), events)
        await manager.register()
        assert await manager.sync_node_status()
        assert api.count("PATCH", NODE_STATUS) == 1
        for condition in api.objects[NODE]["status"]["conditions"]:
            condition.update(
                status="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting node status."
            )
        await clock.advance(10)
        events.recorded.clear()
        assert await manager.sync_node_status()
        assert api.count("PATCH", NODE_STATUS) == 2
        await clock.advance(10)
        assert await manager.sync_node_status()
        assert api.count("PATCH", NODE_STATUS) == 2  # corrected: nothing more to post until the report frequency
    ready = {c["type"]: c for c in api.objects[NODE]["status"]["conditions"]}["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "KubeletReady")
    assert "NodeReady" in events.reasons


async def test_not_ready_status_carries_the_runtime_message(api: Api) -> None:
    health = Health()
    health.ready, health.message = False, "container runtime is down"
    async with api.client() as client:
        manager = _manager(client, FakeClock(), health)
        await manager.register()
        await manager.sync_node_status()
    patch = api.bodies("PATCH", NODE_STATUS)[0]
    ready = {c["type"]: c for c in patch["status"]["conditions"]}["Ready"]
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "KubeletNotReady",
        "container runtime is down",
    )


async def test_a_failing_runtime_health_check_is_not_ready_not_a_crash(api: Api) -> None:
    async def broken() -> tuple[bool, str]:
        raise RuntimeError("socket gone")

    async with api.client() as client:
        manager = NodeStatusManager(
            client, node_name=NAME, config=CONFIG, facts=FACTS, runtime_health=broken, clock=FakeClock()
        )
        await manager.register()
        await manager.sync_node_status()
    ready = {c["type"]: c for c in api.bodies("PATCH", NODE_STATUS)[0]["status"]["conditions"]}["Ready"]
    assert (ready["status"], ready["message"]) == ("False", "container runtime status check failed: socket gone")


async def test_an_unhealthy_pleg_turns_the_node_not_ready_and_its_recovery_ready_again(api: Api) -> None:
    pleg = {"health": (True, "")}
    events = Events()
    async with api.client() as client:
        manager = NodeStatusManager(
            client,
            node_name=NAME,
            config=CONFIG,
            facts=FACTS,
            runtime_health=Health(),
            clock=FakeClock(),
            record_event=events,
            pleg_health=lambda: pleg["health"],
        )
        await manager.register()
        await manager.sync_node_status()
        pleg["health"] = (False, "pleg was last seen active 3m0.5s ago; threshold is 3m0s")
        await manager.sync_node_status()
        pleg["health"] = (True, "")
        await manager.sync_node_status()
    readies = [
        {c["type"]: c for c in body["status"]["conditions"]}["Ready"] for body in api.bodies("PATCH", NODE_STATUS)
    ]
    assert [(r["status"], r["reason"], r["message"]) for r in readies] == [
        ("True", "KubeletReady", "kubelet is posting ready status"),
        ("False", "KubeletNotReady", "PLEG is not healthy: pleg was last seen active 3m0.5s ago; threshold is 3m0s"),
        ("True", "KubeletReady", "kubelet is posting ready status"),
    ]
    assert [r for r in events.reasons if r.startswith("NodeNot") or r == "NodeReady"] == ["NodeNotReady", "NodeReady"]


async def test_a_node_shutting_down_is_not_ready(api: Api) -> None:
    shutdown: dict[str, str | None] = {"status": None}
    async with api.client() as client:
        manager = NodeStatusManager(
            client,
            node_name=NAME,
            config=CONFIG,
            facts=FACTS,
            runtime_health=Health(),
            clock=FakeClock(),
            shutdown_status=lambda: shutdown["status"],
        )
        await manager.register()
        await manager.sync_node_status()
        shutdown["status"] = "node is shutting down"
        await manager.sync_node_status()
    readies = [
        {c["type"]: c for c in body["status"]["conditions"]}["Ready"] for body in api.bodies("PATCH", NODE_STATUS)
    ]
    assert [(r["status"], r["reason"], r["message"]) for r in readies] == [
        ("True", "KubeletReady", "kubelet is posting ready status"),
        ("False", "KubeletNotReady", "node is shutting down"),
    ]


@pytest.mark.parametrize(
    ("failures", "ok", "patches_sent"),
    [
        pytest.param([status(409, "Conflict")], True, 2, id="conflict-then-ok"),
        pytest.param([status(503, "ServiceUnavailable")] * 4, True, 5, id="four-failures-then-ok"),
        pytest.param([status(500, "InternalError")] * 5, False, 5, id="five-failures-give-up-until-next-tick"),
    ],
)
async def test_status_update_retries_five_times_from_a_fresh_get(
    api: Api, failures: list[httpx.Response], ok: bool, patches_sent: int
) -> None:
    async with api.client() as client:
        manager = _manager(client, FakeClock())
        await manager.register()
        api.fail("PATCH", NODE_STATUS, *failures)
        assert await manager.sync_node_status() is ok
    assert api.count("PATCH", NODE_STATUS) == patches_sent
    assert api.count("GET", NODE) == patches_sent  # every try reads the Node first, as upstream's
    assert manager.status_patches == (1 if ok else 0)
    assert (manager.last_report_time is not None) is ok


def test_status_patch_nulls_resources_that_went_away() -> None:
    old = {"capacity": {"cpu": "4", "hugepages-2Mi": "2Mi"}, "allocatable": {"cpu": "4"}}
    new = {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}}
    assert _status_patch(old, new) == {
        "status": {"capacity": {"cpu": "4", "hugepages-2Mi": None}, "allocatable": {"cpu": "4"}}
    }


@pytest.mark.parametrize(
    ("old", "new", "reasons"),
    [
        pytest.param([], [("Ready", "True")], [], id="new-ready-records-nothing"),
        pytest.param([("Ready", "False")], [("Ready", "True")], ["NodeReady"], id="ready"),
        pytest.param([("Ready", "True")], [("Ready", "False")], ["NodeNotReady"], id="not-ready"),
        pytest.param([("Ready", "True")], [("Ready", "True")], [], id="unchanged"),
        pytest.param([], [("MemoryPressure", "False")], ["NodeHasSufficientMemory"], id="new-pressure"),
        pytest.param([("DiskPressure", "False")], [("DiskPressure", "True")], ["NodeHasDiskPressure"], id="disk"),
        pytest.param([], [("NetworkUnavailable", "False")], [], id="not-ours"),
    ],
)
def test_condition_events(old: list[tuple[str, str]], new: list[tuple[str, str]], reasons: list[str]) -> None:
    def conds(pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
        return [{"type": t, "status": s} for t, s in pairs]

    assert condition_events(conds(old), conds(new)) == reasons


async def test_while_the_runtime_is_down_its_return_is_reported_within_a_second(api: Api) -> None:
    """Issue 34: after a runtime outage the node is Ready about a second after the runtime answers again, not at
    the next 10 s status tick; while the runtime is up, the loop keeps its period and asks nothing in between."""
    clock, health = FakeClock(), Health()
    calls = 0

    async def counted() -> tuple[bool, str]:
        nonlocal calls
        calls += 1
        return await health()

    async with api.client() as client:
        manager = NodeStatusManager(
            client, node_name=NAME, config=CONFIG, facts=FACTS, runtime_health=counted, clock=clock
        )
        await manager.register()
        task = asyncio.create_task(manager.run())
        try:
            await _settle(lambda: manager.status_patches == 1)
            for _ in range(9):
                await clock.advance(1)
            assert calls == 2  # registration and the first tick: nothing asked between ticks while Ready
            health.ready, health.message = False, "container runtime is down"
            await clock.advance(1)  # t=10: the tick reports NotReady
            await _settle(lambda: manager.status_patches == 2)
            for _ in range(3):  # t=13: still down, asked every second
                await clock.advance(1)
            health.ready, health.message = True, ""
            await clock.advance(1)  # t=14: the runtime answers; the status follows at once
            await _settle(lambda: manager.status_patches == 3)
            assert clock.t == 14
            ready = {c["type"]: c for c in api.bodies("PATCH", NODE_STATUS)[-1]["status"]["conditions"]}["Ready"]
            assert ready["status"] == "True"
            # Back to the plain period: the next tick is 10 s after that status, with no question in between.
            asked = calls
            for _ in range(9):
                await clock.advance(1)
            assert calls == asked
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


async def test_a_node_whose_csinode_is_not_made_registers_not_ready_and_turns_ready_within_100ms(api: Api) -> None:
    """As upstream: the Node is created NotReady, "CSINode is not yet initialized", and its Ready status is posted
    within 100 ms of the CSINode being made (fastStatusUpdateOnce), not at the next 10 s tick; the loop then keeps
    its period."""
    clock, events = FakeClock(), Events()
    storage: dict[str, str | None] = {"error": "CSINode is not yet initialized"}
    looked = 0

    def storage_status() -> str | None:
        nonlocal looked
        looked += 1
        return storage["error"]

    async with api.client() as client:
        manager = NodeStatusManager(
            client,
            node_name=NAME,
            config=CONFIG,
            facts=FACTS,
            runtime_health=Health(),
            clock=clock,
            record_event=events,
            storage_status=storage_status,
        )
        await manager.register()
        created = {c["type"]: c for c in api.bodies("POST", paths.nodes())[0]["status"]["conditions"]}["Ready"]
        assert (created["status"], created["reason"], created["message"]) == (
            "False",
            "KubeletNotReady",
            "CSINode is not yet initialized",
        )
        task = asyncio.create_task(manager.run())
        try:
            await _settle(lambda: manager.status_patches == 1)  # the first tick: still NotReady
            for _ in range(3):
                await clock.advance(0.1)
            assert manager.status_patches == 1
            storage["error"] = None
            await clock.advance(0.1)
            await _settle(lambda: manager.status_patches == 2)
            assert clock.t == pytest.approx(0.4)
            ready = {c["type"]: c for c in api.bodies("PATCH", NODE_STATUS)[-1]["status"]["conditions"]}["Ready"]
            assert (ready["status"], ready["reason"]) == ("True", "KubeletReady")
            assert "NodeReady" in events.reasons
            # Back to the plain period: the storage state is not looked at between ticks any more.
            seen = looked
            for _ in range(9):
                await clock.advance(1)
            assert looked == seen
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


# The Lease.


async def test_run_creates_the_lease_then_renews_it_every_quarter_of_its_duration(api: Api) -> None:
    clock = FakeClock()
    async with api.client() as client:
        manager = _manager(client, clock)
        await manager.register()
        task = asyncio.create_task(manager.run())
        try:
            await _settle(lambda: api.count("POST", LEASES) == 1 and manager.status_patches == 1)
            lease = api.objects[LEASE]
            assert lease["metadata"]["ownerReferences"] == [
                {"apiVersion": "v1", "kind": "Node", "name": NAME, "uid": f"uid-{NAME}"}
            ]
            assert lease["spec"] == {
                "holderIdentity": NAME,
                "leaseDurationSeconds": 40,
                "renewTime": "2026-01-01T00:00:00.000000Z",
            }
            assert manager.renew_interval == 10
            for tick in range(1, 4):
                await clock.advance(9.9)
                assert api.count("PUT", LEASE) == tick - 1
                await clock.advance(0.1)
                await _settle(lambda tick=tick: api.count("PUT", LEASE) == tick)
                assert api.objects[LEASE]["spec"]["renewTime"] == f"2026-01-01T00:00:{10 * tick:02d}.000000Z"
            assert manager.lease_renewals == 3
            # Status ticks went by too (every 10 s) but nothing changed: still the one post, after one read of the
            # Node per tick (the first tick's included), as upstream's.
            assert api.count("PATCH", NODE_STATUS) == 1
            assert api.count("GET", NODE) == 4
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


async def test_without_renew_lease_run_posts_the_status_and_leaves_the_lease_to_its_caller(api: Api) -> None:
    # A fleet's node: its Lease is renewed on the fleet's heartbeat thread, which reads the Node's UID from here.
    clock = FakeClock()
    async with api.client() as client:
        manager = NodeStatusManager(
            client,
            node_name=NAME,
            config=CONFIG,
            facts=FACTS,
            runtime_health=Health(),
            clock=clock,
            renew_lease=False,
        )
        assert manager.node_uid() == ""
        await manager.register()
        assert manager.node_uid() == f"uid-{NAME}"
        task = asyncio.create_task(manager.run())
        try:
            await _settle(lambda: manager.status_patches == 1)
            for _ in range(3):
                await clock.advance(10)
            await _settle(lambda: api.count("GET", NODE) == 4)
            assert api.count("POST", LEASES) == api.count("PUT", LEASE) == api.count("GET", LEASE) == 0
            assert manager.lease is None
            assert manager.lease_renewals == 0
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


async def test_lease_conflict_rereads_and_retries() -> None:
    clock = FakeClock()
    node = {"kind": "Node", "metadata": {"name": NAME, "uid": "uid-1", "resourceVersion": "1"}}
    existing: dict[str, Any] = {
        "kind": "Lease",
        "metadata": {"name": NAME, "namespace": "kube-node-lease", "resourceVersion": "5"},
        "spec": {"holderIdentity": NAME, "leaseDurationSeconds": 40},
    }
    newer = copy.deepcopy(existing)
    newer["metadata"]["resourceVersion"] = "7"

    def echo(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=json.loads(request.content))

    script = (
        Script()
        .add("POST", paths.nodes(), status(409, "AlreadyExists"))
        .add("GET", NODE, httpx.Response(200, json=node))
        .add("PATCH", NODE, httpx.Response(200, json=node))
        .add("GET", LEASE, httpx.Response(200, json=existing))
        .add("PUT", LEASE, status(409, "Conflict", "the object has been modified"))
        .add("GET", LEASE, httpx.Response(200, json=newer))
        .add("PUT", LEASE, echo)
    )
    async with script.client() as client:
        manager = _manager(client, clock)
        await manager.register()
        assert await manager.sync_lease()
    assert not script.steps
    first, retried = (json.loads(r.content) for r in script.requests if r.method == "PUT")
    assert first["metadata"]["resourceVersion"] == "5"
    assert retried["metadata"]["resourceVersion"] == "7"
    # A lease without an owner gets the Node as its owner, as setNodeOwnerFunc does.
    assert retried["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert manager.lease_renewals == 1


async def test_lease_renewal_from_a_stale_lease_falls_back_to_get(api: Api) -> None:
    clock = FakeClock()
    async with api.client() as client:
        manager = _manager(client, clock, config=KubeletConfiguration(node_lease_duration_seconds=8))
        await manager.register()
        assert await manager.sync_lease()  # created
        api.fail("PUT", LEASE, *[status(503, "ServiceUnavailable")] * 5)
        assert await manager.sync_lease()  # five failures with the latest lease, then GET and PUT
        assert api.count("PUT", LEASE) == 6
        assert manager.lease_renewals == 1
        assert api.objects[LEASE]["spec"]["leaseDurationSeconds"] == 8
        assert manager.renew_interval == 2
        # The lease was deleted behind our back: recreated.
        del api.objects[LEASE]
        assert await manager.sync_lease()
        assert api.count("POST", LEASES) == 2


async def test_config_report_frequency_is_respected(api: Api) -> None:
    clock = FakeClock()
    config = KubeletConfiguration(node_status_report_frequency=timedelta(seconds=30))
    async with api.client() as client:
        manager = _manager(client, clock, config=config)
        await manager.register()
        await manager.sync_node_status()
        await clock.advance(29)
        await manager.sync_node_status()
        assert manager.status_patches == 1
        await clock.advance(1)
        await manager.sync_node_status()
        assert manager.status_patches == 2
