"""The correlator's three steps (aggregation, de-duplication, the spam filter) with upstream's figures."""

from __future__ import annotations

import datetime

from nodeagent.eventcorrelation import COMBINED_PREFIX, EventCorrelator, TokenBucket, event_name
from nodeagent.events import ObjectRef

T0 = datetime.datetime(2026, 11, 30, 12, 0, 0, tzinfo=datetime.UTC)
POD = ObjectRef("Pod", "default", "web", "uid-1", field_path="spec.containers{main}")
OTHER = ObjectRef("Pod", "default", "db", "uid-2")


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def test_repeats_are_one_event_counted_up() -> None:
    correlator = EventCorrelator()
    first = correlator.correlate(POD, "Warning", "BackOff", "Back-off restarting failed container", at(0))
    again = correlator.correlate(POD, "Warning", "BackOff", "Back-off restarting failed container", at(10))
    assert (first.count, first.name, first.first, first.skip) == (1, event_name(POD, at(0)), at(0), False)
    assert (again.count, again.name, again.first, again.last) == (2, first.name, at(0), at(10))
    # Another field path is another event (the container it is about is part of the key).
    sidecar = ObjectRef("Pod", "default", "web", "uid-1", field_path="spec.containers{sidecar}")
    assert (
        correlator.correlate(sidecar, "Warning", "BackOff", "Back-off restarting failed container", at(11)).count == 1
    )


def test_the_tenth_different_message_of_a_reason_is_combined_and_counted_up() -> None:
    correlator = EventCorrelator()
    plain = [correlator.correlate(POD, "Warning", "Failed", f"error {i}", at(i)) for i in range(9)]
    assert [e.message for e in plain] == [f"error {i}" for i in range(9)] and all(e.count == 1 for e in plain)
    combined = correlator.correlate(POD, "Warning", "Failed", "error 9", at(9))
    assert combined.message == COMBINED_PREFIX + "error 9"
    assert combined.count == 1 and combined.name not in {e.name for e in plain}
    more = correlator.correlate(POD, "Warning", "Failed", "error 10", at(10))
    assert (more.message, more.name, more.count) == (COMBINED_PREFIX + "error 10", combined.name, 2)
    # Another reason is aggregated apart.
    assert correlator.correlate(POD, "Warning", "Other", "error 11", at(11)).message == "error 11"


def test_similar_events_further_apart_than_ten_minutes_start_afresh() -> None:
    correlator = EventCorrelator()
    for i in range(9):
        correlator.correlate(POD, "Warning", "Failed", f"error {i}", at(i))
    # 10 minutes and a second after the last one: the set of messages seen is new.
    assert correlator.correlate(POD, "Warning", "Failed", "error 9", at(8 + 601)).message == "error 9"


def test_an_object_gets_25_events_then_one_every_five_minutes() -> None:
    correlator = EventCorrelator()
    sent = [not correlator.correlate(POD, "Normal", f"Reason{i}", "m", at(i * 0.1)).skip for i in range(30)]
    assert sent == [True] * 25 + [False] * 5
    # Per object: another pod still has its burst.
    assert not correlator.correlate(OTHER, "Normal", "Reason0", "m", at(3)).skip
    # The field path does not make another object.
    assert correlator.correlate(POD, "Normal", "Late", "m", at(100)).skip
    assert not correlator.correlate(POD, "Normal", "Late", "m", at(2.9 + 300)).skip
    assert correlator.correlate(POD, "Normal", "Late", "m", at(2.9 + 301)).skip


def test_a_dropped_repeat_still_counts() -> None:
    correlator = EventCorrelator(spam_burst=2)
    assert not correlator.correlate(POD, "Warning", "BackOff", "m", at(0)).skip
    assert not correlator.correlate(POD, "Warning", "BackOff", "m", at(1)).skip
    assert correlator.correlate(POD, "Warning", "BackOff", "m", at(2)).skip
    later = correlator.correlate(POD, "Warning", "BackOff", "m", at(400))
    assert (later.skip, later.count) == (False, 4)


def test_the_token_bucket_refills_up_to_its_burst() -> None:
    bucket = TokenBucket(2, 0.5, now=0.0)
    assert [bucket.try_accept(0.0) for _ in range(3)] == [True, True, False]
    assert bucket.try_accept(2.0) and not bucket.try_accept(2.0)
    assert [bucket.try_accept(100.0) for _ in range(3)] == [True, True, False]  # never more than the burst


def test_the_caches_forget_the_least_recently_used_key() -> None:
    correlator = EventCorrelator(cache_size=2)
    correlator.correlate(POD, "Normal", "A", "m", at(0))
    correlator.correlate(OTHER, "Normal", "B", "m", at(1))
    correlator.correlate(OTHER, "Normal", "C", "m", at(2))
    assert correlator.correlate(POD, "Normal", "A", "m", at(3)).count == 1  # forgotten: a new Event
