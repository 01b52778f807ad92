"""Building the cached pod status: from an event (merged with the pod's other sandboxes), IPs kept after the end."""

from __future__ import annotations

from cri.v1 import api_pb2
from pleg.status import (
    ContainerRecord,
    PodStatus,
    from_event,
    make_pod_status,
    preserve_ips,
    sandbox_ips,
    without_sandbox,
)
from tests.unit.pleg.fakeruntime import FakeRuntime


def runtime() -> FakeRuntime:
    t = iter(range(1, 10_000))
    return FakeRuntime(lambda: next(t) * 1_000_000_000)


def test_an_event_gives_the_sandbox_and_its_containers_newest_first() -> None:
    rt = runtime()
    sb = rt.run_sandbox("u1", "web", "ns1", ip="198.18.0.7")
    first = rt.run_container(sb, "a")
    second = rt.run_container(sb, "b")
    status = from_event(rt.make_event(second, sb, api_pb2.CONTAINER_STARTED_EVENT), None)
    assert status is not None
    assert (status.uid, status.name, status.namespace, status.ips) == ("u1", "web", "ns1", ("198.18.0.7",))
    assert [s.id for s in status.sandboxes] == [sb]
    assert [(c.sandbox_id, c.status.id) for c in status.containers] == [(sb, second), (sb, first)]


def test_an_event_keeps_the_pods_other_sandbox_and_replaces_its_own() -> None:
    rt = runtime()
    old_sb = rt.run_sandbox("u1")
    old_c = rt.run_container(old_sb, "a")
    rt.stop_sandbox(old_sb)
    before = from_event(rt.make_event(old_sb, old_sb, api_pb2.CONTAINER_STOPPED_EVENT), None)
    new_sb = rt.run_sandbox("u1")
    new_c = rt.run_container(new_sb, "a")
    after = from_event(rt.make_event(new_c, new_sb, api_pb2.CONTAINER_STARTED_EVENT), before)
    assert after is not None
    assert [s.id for s in after.sandboxes] == [new_sb, old_sb]
    assert [c.status.id for c in after.containers] == [new_c, old_c]
    assert after.containers[1].status.state == api_pb2.CONTAINER_EXITED


def test_a_deleted_container_is_gone_from_the_status() -> None:
    rt = runtime()
    sb = rt.run_sandbox("u1")
    c = rt.run_container(sb, "a")
    before = from_event(rt.make_event(c, sb, api_pb2.CONTAINER_STARTED_EVENT), None)
    rt.exit_container(c)
    rt.remove_container(c)
    after = from_event(rt.make_event(c, sb, api_pb2.CONTAINER_DELETED_EVENT), before)
    assert after is not None and after.containers == () and [s.id for s in after.sandboxes] == [sb]


def test_events_of_foreign_or_vanished_sandboxes_say_nothing() -> None:
    rt = runtime()
    foreign = rt.run_foreign_sandbox()
    assert from_event(rt.make_event(foreign, foreign, api_pb2.CONTAINER_STARTED_EVENT), None) is None
    assert from_event(rt.make_event("sb-gone", "sb-gone", api_pb2.CONTAINER_DELETED_EVENT), None) is None


def test_a_stopped_pod_keeps_its_ips_and_a_ready_one_reports_its_own() -> None:
    rt = runtime()
    sb = rt.run_sandbox("u1", ip="198.18.0.9")
    running = from_event(rt.make_event(sb, sb, api_pb2.CONTAINER_STARTED_EVENT), None)
    assert running is not None and running.ips == ("198.18.0.9",)
    rt.stop_sandbox(sb)
    stopped = from_event(rt.make_event(sb, sb, api_pb2.CONTAINER_STOPPED_EVENT), running)
    assert stopped is not None and stopped.ips == ("198.18.0.9",)
    assert sandbox_ips(stopped.sandboxes) == ()  # the runtime itself no longer reports one
    fresh = make_pod_status("u1", sandboxes=[api_pb2.PodSandboxStatus(id="x", state=api_pb2.SANDBOX_READY)])
    assert preserve_ips(fresh, running).ips == ()  # a ready sandbox without IP is believed (host network)


def test_without_sandbox_drops_it_and_its_containers() -> None:
    rt = runtime()
    a, b = rt.run_sandbox("u1"), rt.run_sandbox("u1")
    ca, cb = rt.run_container(a, "x"), rt.run_container(b, "x")
    status = from_event(rt.make_event(cb, b, api_pb2.CONTAINER_STARTED_EVENT), None)
    status = from_event(rt.make_event(ca, a, api_pb2.CONTAINER_STARTED_EVENT), status)
    assert status is not None
    rest = without_sandbox(status, a)
    assert [s.id for s in rest.sandboxes] == [b] and [c.status.id for c in rest.containers] == [cb]
    assert without_sandbox(rest, b).empty


def test_name_and_namespace_come_from_labels_when_only_containers_are_left() -> None:
    container = api_pb2.ContainerStatus(
        id="c", labels={"io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "ns"}
    )

    status = make_pod_status("u", containers=[ContainerRecord("gone", container)])
    assert (status.name, status.namespace) == ("web", "ns")
    assert PodStatus(uid="u").empty and not status.empty
