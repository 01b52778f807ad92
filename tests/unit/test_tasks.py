"""Supervisor: a failing or ending task is logged and flags failure; stop cancels every task in reverse order."""

from __future__ import annotations

import asyncio

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
