"""The pod status cache: newest write wins, and readers wait for a status newer than their last sync."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from cri.errors import UnavailableError
from pleg.cache import Cache, PodStatusUnavailable
from pleg.status import PodStatus


def st(name: str) -> PodStatus:
    return PodStatus(uid="u", name=name)


async def ticks(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_get_of_an_unknown_pod_is_empty() -> None:
    assert Cache().get("u") == PodStatus(uid="u")


@pytest.mark.parametrize(
    ("writes", "expected_name", "results"),
    [
        ([("a", 1.0), ("b", 2.0)], "b", [True, True]),
        ([("a", 2.0), ("b", 1.0)], "a", [True, False]),  # an older inspection never overwrites a newer event
        ([("a", 2.0), ("b", 2.0)], "b", [True, True]),  # the same time: the later write wins
    ],
)
def test_set_keeps_the_newest(writes: list[tuple[str, float]], expected_name: str, results: list[bool]) -> None:
    cache = Cache()
    assert [cache.set("u", st(name), None, at) for name, at in writes] == results
    assert cache.get("u").name == expected_name


async def test_get_newer_than_answers_at_once_when_the_entry_is_newer() -> None:
    cache = Cache()
    cache.set("u", st("a"), None, 10.0)
    assert (await cache.get_newer_than("u", 9.0)).name == "a"


async def test_get_newer_than_waits_for_a_newer_write() -> None:
    cache = Cache()
    cache.set("u", st("old"), None, 10.0)
    reader = asyncio.create_task(cache.get_newer_than("u", 10.0))
    await ticks()
    assert not reader.done() and cache.waiting() == 1
    cache.set("u", st("same-time"), None, 10.0)  # not newer than 10
    await ticks()
    assert not reader.done()
    cache.set("u", st("new"), None, 10.5)
    assert (await reader).name == "new"
    assert cache.waiting() == 0


async def test_the_global_timestamp_answers_for_unchanged_and_unknown_pods() -> None:
    cache = Cache()
    cache.set("u", st("unchanged"), None, 5.0)
    known = asyncio.create_task(cache.get_newer_than("u", 7.0))
    unknown = asyncio.create_task(cache.get_newer_than("gone", 7.0))
    await ticks()
    assert not known.done() and not unknown.done()
    cache.update_time(6.0)  # a relist that started before the reader's sync ended is not enough
    await ticks()
    assert not known.done()
    cache.update_time(8.0)
    assert (await known).name == "unchanged"
    assert await unknown == PodStatus(uid="gone")


async def test_before_the_first_relist_nothing_is_known() -> None:
    cache = Cache()
    reader = asyncio.create_task(cache.get_newer_than("u", 0.0))
    await ticks()
    assert not reader.done()
    cache.update_time(1.0)
    assert await reader == PodStatus(uid="u")


async def test_a_stored_error_is_raised_to_the_reader() -> None:
    cache = Cache()
    error = UnavailableError("ContainerStatus", grpc.StatusCode.UNAVAILABLE, "down")
    cache.set("u", None, error, 3.0)
    with pytest.raises(PodStatusUnavailable) as raised:
        await cache.get_newer_than("u", 2.0)
    assert raised.value.error is error and raised.value.__cause__ is error
    assert cache.get("u") == PodStatus(uid="u")  # get never raises


async def test_set_observed_time_wakes_readers_without_changing_the_status() -> None:
    cache = Cache()
    cache.set("u", st("a"), None, 1.0)
    reader = asyncio.create_task(cache.get_newer_than("u", 4.0))
    await ticks()
    cache.set_observed_time("u", 5.0)
    assert (await reader).name == "a"
    # The entry now counts as seen at 5: an inspection from before that loses.
    assert not cache.set("u", st("older"), None, 4.5)


async def test_delete_then_global_time_gives_an_empty_status() -> None:
    cache = Cache()
    cache.set("u", st("a"), None, 1.0)
    cache.delete("u")
    cache.update_time(2.0)
    assert await cache.get_newer_than("u", 1.5) == PodStatus(uid="u")


async def test_a_cancelled_reader_leaves_no_subscription() -> None:
    cache = Cache()
    reader = asyncio.create_task(cache.get_newer_than("u", 1.0))
    await ticks()
    assert cache.waiting() == 1
    reader.cancel()
    await ticks()
    assert cache.waiting() == 0
    cache.set("u", st("a"), None, 2.0)  # nobody to notify: no error
