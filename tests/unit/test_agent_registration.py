"""When the Node's registration may hold back the pod sources (agent.registration_wait): on a kubeadm control plane
the apiserver is one of the node's own static pods, so an agent with static pods must not wait for it for ever."""

from __future__ import annotations

import asyncio

import pytest

from nodeagent.agent import STATIC_POD_REGISTRATION_WAIT, _bounded, registration_wait


@pytest.mark.parametrize(
    ("static_pod_path", "wait"),
    [
        ("", None),  # nothing can run before the apiserver answers: register first, retrying for ever
        (None, None),
        ("/etc/kubernetes/manifests", STATIC_POD_REGISTRATION_WAIT),
    ],
)
def test_registration_wait(static_pod_path: str | None, wait: float | None) -> None:
    assert registration_wait(static_pod_path) == wait


def test_a_bounded_registration_gives_up_and_cancels() -> None:
    cancelled = asyncio.Event()

    async def never() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    async def main() -> None:
        await _bounded(never(), 0.01)
        assert cancelled.is_set()

    asyncio.run(main())
