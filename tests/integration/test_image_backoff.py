"""An image that cannot be pulled is retried exactly when its back-off expires: 10 s, 20 s, 40 s (upstream's 10 s
doubling), measured from the agent's log of each failed pull, and the pod is not synced every 2 s in between (its
Normal BackOff event, which every sync inside the back-off records, stays near one)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import itertools
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import NotFound
from nodeagent.testbed.layout import Settings
from nodeagent.testbed.testbed import Testbed
from tests.integration.agentproc import NS, Agent, clean_up, eventually, node_ready, start_agent, stop_agent

Obj = dict[str, Any]
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ", re.MULTILINE)


@pytest.fixture(scope="module")
def agent(testbed: Testbed, settings: Settings) -> Iterator[Agent]:
    running = start_agent(testbed, testbed.layout.logs / "agent-image-backoff.log")
    try:
        yield running
    finally:
        stop_agent(running)
        asyncio.run(clean_up(testbed, settings))


def _failed_pulls(text: str, pod: str) -> list[datetime.datetime]:
    """When each pull of `pod`'s image failed, from the agent's log lines "image pull failed pod=NS/NAME ..."."""
    out = []
    for line in text.splitlines():
        if f"image pull failed pod={NS}/{pod} " in line:
            stamp = _STAMP.match(line)
            assert stamp is not None, line
            out.append(datetime.datetime.strptime(stamp[1], "%Y-%m-%d %H:%M:%S,%f"))
    return out


async def test_pulls_of_a_missing_image_are_retried_when_the_back_off_expires(
    agent: Agent, admin: KubeClient, settings: Settings
) -> None:
    await eventually(lambda: node_ready(admin, settings.node_name), timeout=30, what="node Ready", agent=agent)
    name = f"badimage-{uuid.uuid4().hex[:5]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": settings.node_name,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": f"{settings.registry}/missing:never"}],
        },
    }
    await admin.create(paths.pods(NS), pod)
    try:

        async def four_pulls() -> list[datetime.datetime] | None:
            pulls = _failed_pulls(agent.log.read_text(errors="replace"), name)
            return pulls if len(pulls) >= 4 else None

        pulls = await eventually(four_pulls, timeout=120, what="four failed pulls", agent=agent)
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(pulls)][:3]
        print(f"retry gaps: {', '.join(f'{g:.2f}s' for g in gaps)}")
        for gap, backoff in zip(gaps, (10, 20, 40), strict=True):
            assert backoff * 0.75 <= gap <= backoff * 1.25, gaps
            # Never before the back-off expires, and right when it does (not at the next 2 s poll).
            assert backoff - 0.1 <= gap <= backoff + 1.0, gaps

        events = (await admin.list(paths.events(NS), field_selector=f"involvedObject.name={name}"))["items"]
        by_reason: dict[str, int] = {}
        for event in events:
            by_reason[event["reason"]] = by_reason.get(event["reason"], 0) + int(event.get("count") or 1)
        assert by_reason.get("Pulling", 0) >= 4
        # Each sync inside a back-off records a BackOff event: syncs every 2 s would have recorded ~35 by now.
        assert by_reason.get("BackOff", 0) <= 4, by_reason
        status = (await admin.get(paths.pod(NS, name)))["status"]
        waiting = status["containerStatuses"][0]["state"]["waiting"]
        assert waiting["reason"] in ("ErrImagePull", "ImagePullBackOff")
        assert "missing" in waiting["message"]
    finally:
        with contextlib.suppress(NotFound):
            await admin.delete(paths.pod(NS, name), grace_period_seconds=0)
