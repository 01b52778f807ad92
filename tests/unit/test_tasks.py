"""Supervisor: a failing or ending task is logged and flags failure (a finite task may end); stop cancels every
task in reverse order."""

from __future__ import annotations

import asyncio
import logging

import pytest

from nodeagent.tasks import Supervisor


async def test_failure_sets_the_flag_and_stop_cancels_in_reverse_order(caplog: pytest.LogCaptureFixture) -> None:
    stopped: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            stopped.append(name)

    async def broken() -> None:
        raise RuntimeError("boom")

    sup = Supervisor()
    sup.start("first", forever("first"))
    sup.start("second", forever("second"))
    sup.start("broken", broken())
    await asyncio.wait_for(sup.failed.wait(), 1)
    assert "background task failed task=broken" in caplog.text
    await sup.stop()
    assert stopped == ["second", "first"]


async def test_a_finite_task_may_end_but_not_fail(caplog: pytest.LogCaptureFixture) -> None:
    async def done() -> None:
        return None

    async def broken() -> None:
        raise RuntimeError("boom")

    caplog.set_level(logging.INFO, logger="nodeagent.tasks")
    sup = Supervisor()
    await sup.start("once", done(), finite=True)
    assert not sup.failed.is_set()
    assert "background task done task=once" in caplog.text
    await sup.start("ended", done())
    assert sup.failed.is_set()
    assert "background task ended unexpectedly task=ended" in caplog.text
    sup.failed.clear()
    await sup.start("broken-once", broken(), finite=True)
    assert sup.failed.is_set()
    await sup.stop()
