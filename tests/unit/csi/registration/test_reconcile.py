"""The plugin manager's decisions: desired state from scans, what a reconcile starts, and the retry backoff."""

from __future__ import annotations

import pytest

from csi.registration.reconcile import (
    INITIAL_BACKOFF,
    MAX_BACKOFF,
    Backoff,
    Deregister,
    DesiredPlugin,
    Register,
    RegisteredPlugin,
    Scan,
    failed,
    plan,
    update_desired,
)

A, B = "/reg/a.sock", "/reg/b.sock"


def registered(path: str, generation: int) -> RegisteredPlugin:
    return RegisteredPlugin(path, generation, "CSIPlugin", path.rsplit("/", 1)[1], path)


@pytest.mark.parametrize(
    ("case", "desired", "actual", "busy", "backoffs", "expected"),
    [
        ("new socket registers", {A: 1}, {}, set(), {}, [Register(DesiredPlugin(A, 1))]),
        ("registered at its generation: nothing", {A: 1}, {A: 1}, set(), {}, []),
        ("socket gone deregisters", {}, {A: 1}, set(), {}, [Deregister(registered(A, 1))]),
        # A recreated socket: deregister the old plugin first; the register comes on a later reconcile.
        ("recreated socket deregisters first", {A: 2}, {A: 1}, set(), {}, [Deregister(registered(A, 1))]),
        ("busy path waits", {A: 1}, {}, {A}, {}, []),
        ("busy path is not deregistered twice", {}, {A: 1}, {A}, {}, []),
        ("in backoff waits", {A: 1}, {}, set(), {A: Backoff(100.0, 0.5)}, []),
        ("backoff passed retries", {A: 1}, {}, set(), {A: Backoff(99.0, 0.5)}, [Register(DesiredPlugin(A, 1))]),
        (
            "deregistrations come first",
            {B: 3},
            {A: 1},
            set(),
            {},
            [Deregister(registered(A, 1)), Register(DesiredPlugin(B, 3))],
        ),
    ],
)
def test_plan(
    case: str,
    desired: dict[str, int],
    actual: dict[str, int],
    busy: set[str],
    backoffs: dict[str, Backoff],
    expected: list[object],
) -> None:
    del case
    result = plan(
        {path: DesiredPlugin(path, gen) for path, gen in desired.items()},
        {path: registered(path, gen) for path, gen in actual.items()},
        busy,
        backoffs,
        now=100.2,
    )
    assert result == expected


@pytest.mark.parametrize(
    ("case", "desired", "identities", "sockets", "created", "expected", "next_generation"),
    [
        ("first sight", {}, {}, {A: (1, 10)}, set(), {A: 5}, 6),
        ("unchanged keeps its generation", {A: 2}, {A: (1, 10)}, {A: (1, 10)}, set(), {A: 2}, 5),
        ("gone is dropped", {A: 2}, {A: (1, 10)}, {}, set(), {}, 5),
        ("a create event is a new generation", {A: 2}, {A: (1, 10)}, {A: (1, 10)}, {A}, {A: 5}, 6),
        ("a new inode is a new generation", {A: 2}, {A: (1, 10)}, {A: (1, 11)}, set(), {A: 5}, 6),
        ("each new socket its own", {}, {}, {A: (1, 10), B: (1, 11)}, set(), {A: 5, B: 6}, 7),
    ],
)
def test_update_desired(
    case: str,
    desired: dict[str, int],
    identities: dict[str, tuple[int, int]],
    sockets: dict[str, tuple[int, int]],
    created: set[str],
    expected: dict[str, int],
    next_generation: int,
) -> None:
    del case
    new, new_identities, generation = update_desired(
        {path: DesiredPlugin(path, gen) for path, gen in desired.items()}, identities, Scan(sockets), created, 5
    )
    assert {path: plugin.generation for path, plugin in new.items()} == expected
    assert new_identities == sockets
    assert generation == next_generation


def test_backoff_doubles_up_to_upstreams_cap() -> None:
    backoff = failed(None, 0.0)
    assert backoff == Backoff(0.0, INITIAL_BACKOFF)
    assert not backoff.allows(0.5)  # upstream: retry only once more than durationBeforeRetry has passed
    assert backoff.allows(0.51)
    durations = []
    for step in range(12):
        backoff = failed(backoff, float(step))
        durations.append(backoff.duration)
    assert durations[:4] == [1.0, 2.0, 4.0, 8.0]
    assert durations[-1] == MAX_BACKOFF == 122.0
