"""The event recorder's sending: upstream's retries when the apiserver cannot be reached, none when it refuses, and
the correlator's verdict applied (a patch for a repeat, nothing for a filtered event). The apiserver's side (the
Node authorizer, a real count patch) is tests/integration/test_events.py."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from nodeagent.eventcorrelation import EventCorrelator
from nodeagent.events import MAX_TRIES, EventRecorder, ObjectRef
from nodeagent.kube.errors import ApiError, ApiUnavailable, NotFound

T0 = datetime.datetime(2026, 11, 30, 12, 0, 0, tzinfo=datetime.UTC)
POD = ObjectRef("Pod", "default", "web", "uid-1")


@dataclass
class Client:
    """Records what the recorder sends; fails the first `unreachable` requests as an apiserver that cannot be
    reached, or every request with `refuse`."""

    unreachable: int = 0
    refuse: ApiError | None = None
    expired: set[str] = field(default_factory=set)
    requests: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def _answer(self, verb: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.requests.append((verb, path, body))
        if self.unreachable:
            self.unreachable -= 1
            raise ApiUnavailable("connection refused")
        if self.refuse is not None:
            raise self.refuse
        if verb == "PATCH" and path.rsplit("/", 1)[1] in self.expired:
            raise NotFound(404, "NotFound", "not found")
        return body

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._answer("POST", path, body)

    async def patch(self, path: str, body: dict[str, Any], *, patch_type: str) -> dict[str, Any]:
        assert patch_type == "merge"
        return self._answer("PATCH", path, body)


def recorder(client: Client, sleeps: list[float], clock: list[datetime.datetime]) -> EventRecorder:
    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    return EventRecorder(
        client,  # type: ignore[arg-type]
        "node-1",
        now=lambda: clock[0],
        correlator=EventCorrelator(spam_burst=3),
        sleep=sleep,
    )


async def test_an_unreachable_apiserver_is_tried_again_10_s_apart_the_first_wait_random() -> None:
    client, sleeps = Client(unreachable=3), list[float]()
    events = recorder(client, sleeps, [T0])
    events.record(POD, "Normal", "Pulled", "pulled")
    await events._deliver(events._queue.get_nowait(), tries=MAX_TRIES)
    assert [verb for verb, _, _ in client.requests] == ["POST"] * 4
    assert 0 <= sleeps[0] < 10 and sleeps[1:] == [10.0, 10.0]
    assert (events.sent, events.failed) == (1, 0)


async def test_twelve_tries_then_the_event_is_given_up() -> None:
    client, sleeps = Client(unreachable=100), list[float]()
    events = recorder(client, sleeps, [T0])
    events.record(POD, "Normal", "Pulled", "pulled")
    await events._deliver(events._queue.get_nowait(), tries=MAX_TRIES)
    assert len(client.requests) == 12 and len(sleeps) == 11
    assert (events.sent, events.failed) == (0, 1)


async def test_a_refusal_is_not_tried_again() -> None:
    client, sleeps = Client(refuse=ApiError(422, "Invalid", "bad event")), list[float]()
    events = recorder(client, sleeps, [T0])
    events.record(POD, "Normal", "Pulled", "pulled")
    await events._deliver(events._queue.get_nowait(), tries=MAX_TRIES)
    assert len(client.requests) == 1 and sleeps == []
    assert (events.sent, events.failed) == (0, 1)


async def test_a_repeat_patches_and_an_expired_event_is_created_again_under_its_name() -> None:
    client, sleeps, clock = Client(), list[float](), [T0]
    events = recorder(client, sleeps, clock)
    events.record(POD, "Warning", "BackOff", "back-off")
    clock[0] = T0 + datetime.timedelta(seconds=10)
    events.record(POD, "Warning", "BackOff", "back-off")
    await events.flush()
    (_, _, created), (verb, path, patch) = client.requests
    name = created["metadata"]["name"]
    assert verb == "PATCH" and path.endswith(f"/namespaces/default/events/{name}")
    assert patch == {"count": 2, "lastTimestamp": "2026-11-30T12:00:10Z", "message": "back-off"}
    client.expired.add(name)
    clock[0] = T0 + datetime.timedelta(seconds=20)
    events.record(POD, "Warning", "BackOff", "back-off")
    await events.flush()
    verb, _, recreated = client.requests[-1]
    assert verb == "POST" and recreated["metadata"]["name"] == name
    assert (recreated["count"], recreated["firstTimestamp"], recreated["lastTimestamp"]) == (
        3,
        "2026-11-30T12:00:00Z",
        "2026-11-30T12:00:20Z",
    )


async def test_filtered_events_are_counted_and_not_sent() -> None:
    client, sleeps = Client(), list[float]()
    events = recorder(client, sleeps, [T0])
    for i in range(5):
        events.record(POD, "Normal", f"Reason{i}", "m")
    await events.flush()
    assert [body["reason"] for _, _, body in client.requests] == ["Reason0", "Reason1", "Reason2"]
    assert (events.sent, events.filtered) == (3, 2)
