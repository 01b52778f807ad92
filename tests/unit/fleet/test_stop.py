"""A stopped fleet does not wait for ever on nodes that do not end: each has the stop grace, then is cancelled."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from cri.fake import Behaviour
from nodeagent.fleet import fleet as fleet_module
from nodeagent.fleet.plan import FleetOptions


def options(tmp_path: Path) -> FleetOptions:
    return FleetOptions(
        nodes=3, prefix="st", directory=tmp_path, bootstrap_kubeconfig=tmp_path / "bootstrap.conf", stagger=0.0
    )


async def test_nodes_that_do_not_end_when_stopped_are_cancelled_after_the_grace(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    started: list[str] = []
    all_started = asyncio.Event()
    cancelled: list[str] = []

    async def run_node(plan: Any, options: Any, config: Any, behaviour: Any, stop: asyncio.Event, **_: Any) -> None:
        started.append(plan.name)
        if len(started) == 3:
            all_started.set()
        await stop.wait()
        if plan.ordinal == 0:
            return  # ends when stopped
        try:
            await asyncio.Event().wait()  # a stop that waits on an apiserver that never answers
        except asyncio.CancelledError:
            cancelled.append(plan.name)
            raise

    monkeypatch.setattr(fleet_module, "run_node", run_node)
    caplog.set_level(logging.INFO, logger="nodeagent.fleet")
    stop = asyncio.Event()
    task = asyncio.create_task(fleet_module.run_fleet(options(tmp_path), Behaviour(), stop, stop_grace=0.2))
    await asyncio.wait_for(all_started.wait(), 5)
    stop.set()
    result = await asyncio.wait_for(task, 5)
    assert not result.failed
    assert sorted(cancelled) == ["st-1", "st-2"]
    assert "fleet stop grace passed grace=0.2 nodes_running=2: cancelling them" in caplog.text
    assert "fleet stopped nodes=3 failed=0" in caplog.text


async def test_a_node_that_outlives_its_cancellation_does_not_hold_the_fleet(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    release = asyncio.Event()

    async def run_node(plan: Any, options: Any, config: Any, behaviour: Any, stop: asyncio.Event, **_: Any) -> None:
        await stop.wait()
        if plan.ordinal == 2:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                await release.wait()  # its clean-up hangs too

    monkeypatch.setattr(fleet_module, "run_node", run_node)
    stop = asyncio.Event()
    task = asyncio.create_task(fleet_module.run_fleet(options(tmp_path), Behaviour(), stop, stop_grace=0.2))
    await asyncio.sleep(0.1)
    stop.set()
    try:
        result = await asyncio.wait_for(task, 5)
    finally:
        release.set()
    assert not result.failed
    assert "fleet nodes did not end when cancelled nodes=1 grace=0.2" in caplog.text
