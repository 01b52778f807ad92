"""An in-process fake container runtime with the CRI service's semantics, for hollow nodes and tests.

`FakeCRI` has the shape of `cri.client.CRIClient` (`.runtime`, `.image`, an async context manager), so code that
takes a connected client takes a fake one. Its contract with containerd is `tests/cricontract.py`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Self

from cri.fake.behaviour import DEFAULT_BEHAVIOUR, Behaviour
from cri.fake.images import FakeImageService
from cri.fake.runtime import FakeRuntimeService
from cri.fake.streaming import StreamingServer

__all__ = ["Behaviour", "FakeCRI", "FakeImageService", "FakeRuntimeService", "StreamingServer"]


class FakeCRI:
    """One emulated node's runtime: both services, sharing the behaviour and the clock."""

    def __init__(
        self,
        name: str,
        *,
        behaviour: Behaviour = DEFAULT_BEHAVIOUR,
        pod_network: str = "198.18.0.0/24",
        now_ns: Callable[[], int] = time.time_ns,
        streaming: StreamingServer | None = None,
    ) -> None:
        """`streaming`: the server exec URLs are on (shared by the runtimes of a process); None, Exec is
        Unimplemented."""
        self.image = FakeImageService(behaviour=behaviour, now_ns=now_ns)
        self.runtime = FakeRuntimeService(
            name,
            images=self.image,
            behaviour=behaviour,
            pod_network=pod_network,
            now_ns=now_ns,
            streaming=streaming,
        )

    async def close(self) -> None:
        self.runtime.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


if TYPE_CHECKING:
    from cri.service import ImageService, RuntimeService

    _runtime_conforms: type[RuntimeService] = FakeRuntimeService
    _image_conforms: type[ImageService] = FakeImageService
