"""`NodeLease` on its own: upstream's 4 % jitter of the renew period, and the PUT body made from the last Lease
(spec renewed, managedFields left out, the last Lease itself untouched). The apiserver is a small Lease store behind
httpx's transport seam; time is a FakeClock."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from nodeagent.config import KubeletConfiguration
from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.kubeconfig import ClusterCredentials
from nodeagent.nodestatus.lease import LEASE_RENEW_JITTER, NodeLease, jittered
from tests.unit.fakeclock import FakeClock

NAME = "n1"
LEASES = paths.leases("kube-node-lease")
LEASE = paths.lease("kube-node-lease", NAME)
MANAGED = [{"manager": "nodeagent", "operation": "Update", "fieldsV1": {"f:spec": {}}}]


class LeaseStore:
    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.puts: list[dict[str, Any]] = []
        self.version = 0

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json=self.lease) if self.lease else httpx.Response(404, json={})
        body = json.loads(request.content)
        if request.method == "PUT":
            self.puts.append(body)
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"].update(resourceVersion=str(self.version), uid="lease-uid")
        stored["metadata"].setdefault("managedFields", MANAGED)  # the apiserver keeps them when a PUT leaves them out
        self.lease = stored
        return httpx.Response(201 if request.method == "POST" else 200, json=stored)

    def client(self) -> KubeClient:
        return KubeClient(ClusterCredentials(server="https://api.test"), transport=httpx.MockTransport(self.handle))


def _lease(client: KubeClient, clock: FakeClock, rand: Callable[[], float]) -> NodeLease:
    return NodeLease(
        client,
        node_name=NAME,
        config=KubeletConfiguration(node_lease_duration_seconds=40),
        clock=clock,
        node_uid=lambda: "node-uid",
        rand=rand,
    )


def test_the_renew_period_is_jittered_up_to_four_percent_longer() -> None:
    assert LEASE_RENEW_JITTER == 0.04
    assert jittered(10.0, 0.0) == 10.0
    assert jittered(10.0, 0.5) == pytest.approx(10.2)
    assert jittered(10.0, 0.999) == pytest.approx(10.3996)


async def _settle(check: Callable[[], bool]) -> None:
    for _ in range(200):
        if check():
            return
        await asyncio.sleep(0)
    raise AssertionError("not settled")


async def test_run_waits_the_jittered_interval_after_each_sync() -> None:
    store, clock = LeaseStore(), FakeClock()
    draws = iter([1.0, 0.5, 0.0])
    async with store.client() as client:
        lease = _lease(client, clock, lambda: next(draws))
        task = asyncio.create_task(lease.run())
        try:
            await _settle(lambda: store.lease is not None and clock.sleepers == 1)
            await clock.advance(10.39)  # 10 s * (1 + 0.04 * 1.0) = 10.4 s: not yet
            assert store.puts == []
            await clock.advance(0.01)
            await _settle(lambda: len(store.puts) == 1 and clock.sleepers == 1)
            await clock.advance(10.19)  # then 10.2 s (rand 0.5)
            assert len(store.puts) == 1
            await clock.advance(0.01)
            await _settle(lambda: len(store.puts) == 2)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    assert [p["spec"]["renewTime"] for p in store.puts] == [
        "2026-01-01T00:00:10.400000Z",
        "2026-01-01T00:00:20.600000Z",
    ]


async def test_the_default_jitter_is_random_within_four_percent() -> None:
    async with LeaseStore().client() as client:
        lease = NodeLease(
            client, node_name=NAME, config=KubeletConfiguration(), clock=FakeClock(), node_uid=lambda: "u"
        )
        intervals = {lease.next_interval() for _ in range(50)}
    assert all(10.0 <= i < 10.4 for i in intervals)
    assert len(intervals) > 40


async def test_the_put_body_renews_the_spec_leaves_managed_fields_out_and_the_last_lease_untouched() -> None:
    store, clock = LeaseStore(), FakeClock()
    async with store.client() as client:
        lease = _lease(client, clock, lambda: 0.0)
        assert await lease.sync()  # created
        last = lease.lease  # the Lease the next PUT is made from, as the apiserver returned it
        assert last is not None
        last["metadata"]["labels"] = {"kept": "yes"}
        last["spec"]["leaseTransitions"] = 2
        clock.t = 5.0
        assert await lease.sync()
    put = store.puts[-1]
    assert "managedFields" not in put["metadata"]
    assert put["metadata"]["resourceVersion"] == "1"
    assert put["metadata"]["labels"] == {"kept": "yes"}
    assert put["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": NAME, "uid": "node-uid"}]
    assert put["spec"] == {
        "holderIdentity": NAME,
        "leaseDurationSeconds": 40,
        "renewTime": "2026-01-01T00:00:05.000000Z",
        "leaseTransitions": 2,
    }
    # Not mutated by the renewal made from it.
    assert last["metadata"]["managedFields"] == MANAGED
    assert last["spec"]["renewTime"] == "2026-01-01T00:00:00.000000Z"
