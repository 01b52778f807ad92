"""Start-up stages that give way to a stop signal, and the wait for the container runtime.

Every long wait of the agent's start-up (the first answer of the runtime, the first relist, the node's registration,
whatever an unreachable, forbidding or silent apiserver makes it wait for) runs through `until_stopped`: a SIGTERM or
SIGINT cancels the stage at once and start-up ends with `StopRequested`, which the agent treats as a clean exit. The
upstream kubelet gets the same from the context its signal handler cancels; without it an agent that could not
register retried for ever and had to be killed.

The first connection to the runtime is retried (0.5 s doubling to 5 s) for up to runtimeRequestTimeout, as long as
upstream's connection validation may take, because the runtime often starts a moment after the agent; past that the
agent gives up with the runtime's last error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Final, TypeVar

from cri.errors import CRIError
from cri.service import RuntimeService
from nodeagent.clock import Clock

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long a cancelled stage may take to unwind (a thread cannot be interrupted; its result is dropped).
CANCEL_GRACE: Final = 2.0
RUNTIME_RETRY_START: Final = 0.5
RUNTIME_RETRY_CAP: Final = 5.0
RUNTIME_CALL_TIMEOUT: Final = 10.0


class StopRequested(Exception):
    """A stop signal came during start-up: the agent exits cleanly without starting the rest."""

    def __init__(self, stage: str) -> None:
        super().__init__(f"stopped while {stage}")
        self.stage = stage


class RuntimeUnavailable(Exception):
    """The runtime did not answer within the start-up budget."""


async def until_stopped(stop: asyncio.Event, stage: str, work: Awaitable[T], cancel_grace: float = CANCEL_GRACE) -> T:
    """The result of `work`, unless `stop` is set first: then `work` is cancelled (and given `cancel_grace` seconds
    to unwind) and StopRequested raised."""
    if stop.is_set():
        if asyncio.iscoroutine(work):
            work.close()  # never started: nothing to unwind
        raise StopRequested(stage)
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        stopped.cancel()
    if task.done():
        return task.result()
    task.cancel()
    # Bounded: a stage stuck in a thread must not hold the exit.
    await asyncio.wait({task}, timeout=cancel_grace)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved: a failure of the abandoned stage no longer matters
    log.info("start-up interrupted by a stop signal stage=%s", stage)
    raise StopRequested(stage)


def runtime_retry_delays(budget: float) -> list[float]:
    """The waits between tries of the runtime's first call within `budget` seconds (0.5 s doubling, capped at 5 s)."""
    delays: list[float] = []
    total, delay = 0.0, RUNTIME_RETRY_START
    while total + delay <= budget:
        delays.append(delay)
        total += delay
        delay = min(delay * 2, RUNTIME_RETRY_CAP)
    return delays


@dataclass(frozen=True)
class RuntimeVersion:
    """The runtime's name and version from its Version answer, read once at start as upstream's runtime manager
    reads them. The name is the type of every containerID the agent reports (`<name>://<id>`,
    kubecontainer.ContainerID); `str()` is the Node's containerRuntimeVersion, `containerd://1.7.24`."""

    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.name}://{self.version}"


async def wait_for_runtime(runtime: RuntimeService, endpoint: str, *, budget: float, clock: Clock) -> RuntimeVersion:
    """The runtime's version once it answers Version; RuntimeUnavailable when it has not within `budget`."""
    delays = iter(runtime_retry_delays(budget))
    while True:
        try:
            version = await runtime.version("v1", timeout=RUNTIME_CALL_TIMEOUT)
        except CRIError as exc:
            delay = next(delays, None)
            if delay is None:
                raise RuntimeUnavailable(f"container runtime at {endpoint} is not reachable: {exc}") from exc
            log.warning("container runtime not ready endpoint=%s retry_in=%.1fs error=%s", endpoint, delay, exc)
            await clock.sleep(delay)
            continue
        return RuntimeVersion(version.runtime_name, version.runtime_version)
