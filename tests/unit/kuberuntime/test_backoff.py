from __future__ import annotations

import pytest

from nodeagent.kuberuntime.backoff import Backoff, container_backoff_key, crash_loop_message, format_duration


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_doubles_up_to_max() -> None:
    clock = Clock()
    b = Backoff(clock=clock)
    key = container_backoff_key("u", {"name": "c", "image": "busybox"})
    delays = []
    for _ in range(7):
        delays.append(b.next(key))
        clock.now += 1
    assert delays == [10, 20, 40, 80, 160, 300, 300]
    assert b.get(key) == 300
    assert b.get(container_backoff_key("u", {"name": "other", "image": "busybox"})) == 0
    # As upstream's getStableKey: another spec of the same container (a new image) starts from nothing.
    assert b.get(container_backoff_key("u", {"name": "c", "image": "nginx"})) == 0


def test_in_backoff_since_finish() -> None:
    clock = Clock()
    b = Backoff(clock=clock)
    key = ("u", "c")
    assert b.in_backoff(key, 1000.0) == (False, 0.0)  # never failed: start at once
    b.next(key, 1000.0)  # delay 10 s from here
    assert b.in_backoff(key, 1004.0, since=1001.0) == (True, 7.0)
    assert b.in_backoff(key, 1011.0, since=1001.0) == (False, 0.0)
    assert b.in_backoff(key, 1004.0) == (True, 6.0)  # since defaults to the last restart


def test_resets_after_twice_the_maximum() -> None:
    b = Backoff(clock=Clock())
    key = ("u", "c")
    b.next(key, 0.0)
    b.next(key, 1.0)
    assert b.get(key) == 20
    # The container ran more than 10 minutes before it failed again: not in back-off, and the next delay is 10 s.
    assert b.in_backoff(key, 700.0, since=650.0) == (False, 0.0)
    assert b.next(key, 650.0) == 10


def test_gc_and_reset() -> None:
    clock = Clock()
    b = Backoff(clock=clock)
    b.next("a")
    b.next("b")
    b.reset("b")
    assert b.get("b") == 0
    clock.now += 601
    b.gc()
    assert b.get("a") == 0


def test_invalid_parameters() -> None:
    with pytest.raises(ValueError):
        Backoff(initial=10, maximum=5)


@pytest.mark.parametrize(
    ("seconds", "text"), [(10, "10s"), (20, "20s"), (80, "1m20s"), (160, "2m40s"), (300, "5m0s"), (3600, "1h0m0s")]
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_crash_loop_message() -> None:
    message = crash_loop_message(20, container_name="app", pod_name="web", pod_namespace="default", pod_uid="u-1")
    assert message == "back-off 20s restarting failed container=app pod=web_default(u-1)"
