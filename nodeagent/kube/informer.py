"""The reflector: LIST a collection, then WATCH it from the list's resourceVersion, forever.

As client-go's reflector does, with the shape the agent needs:
- after every (re)list the consumer gets `Synced(objects)`, the whole current set: a snapshot replaces what it had
  (objects deleted while the watch was down are simply absent);
- then one `Added` / `Modified` / `Deleted` per change. BOOKMARKs only move the resume point;
- a watch that ends (server timeout, connection drop) resumes from the last resourceVersion seen, bookmarks
  included, so no change is lost;
- 410 Gone (the resume point was compacted away) relists;
- any other failure (apiserver down, 5xx, 429, even 403 while RBAC is being fixed) is retried with capped
  exponential backoff, as upstream retries every ListAndWatch error. Retrying a watch does not relist.

Delivery is at least once: an event counts as seen when `on_event` returns, so if the consumer itself raises an
ApiError (say, a patch failing inside the callback) the step is retried like any failure and the event comes again.

Time is injected (`Clock`), so tests drive the backoff without sleeping. The loop ends only by cancellation or by
an exception that is not the apiserver's (a bug, or the consumer's own error), which it logs and re-raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import NoReturn

from nodeagent.clock import Clock, SystemClock
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import ApiError, ApiUnavailable, Gone
from nodeagent.kube.request import Obj

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Synced:
    """The full set after a (re)list, at `resource_version`."""

    objects: tuple[Obj, ...]
    resource_version: str


@dataclass(frozen=True)
class Added:
    object: Obj


@dataclass(frozen=True)
class Modified:
    object: Obj


@dataclass(frozen=True)
class Deleted:
    """The object's last state (its resourceVersion is that of the deletion)."""

    object: Obj


ReflectorEvent = Synced | Added | Modified | Deleted
_CHANGES: dict[str, type[Added | Modified | Deleted]] = {"ADDED": Added, "MODIFIED": Modified, "DELETED": Deleted}


@dataclass(frozen=True)
class Backoff:
    """Capped exponential backoff; upstream's reflector starts at 800 ms and caps at 30 s, with jitter."""

    initial: float = 0.8
    factor: float = 2.0
    cap: float = 30.0
    jitter: float = 0.5

    def delay(self, failures: int, rand: float) -> float:
        """The wait after the `failures`-th failure in a row (1-based); `rand` in [0, 1) spreads it upward."""
        base = self.initial * self.factor ** max(failures - 1, 0)
        return min(self.cap, base * (1.0 + self.jitter * rand))


DEFAULT_BACKOFF = Backoff()
# A watch that ends cleanly this fast without a single event is a server refusing to watch, not a timeout:
# back off rather than spin (client-go's "very short watch").
SHORT_WATCH = 1.0
# The server ends each watch after a random 5-10 minutes, as the reflector asks (minWatchTimeout 5 min).
MIN_WATCH_TIMEOUT = 300


async def list_and_watch(
    client: KubeClient,
    path: str,
    *,
    on_event: Callable[[ReflectorEvent], Awaitable[None]],
    field_selector: str | None = None,
    label_selector: str | None = None,
    page_size: int | None = 500,
    backoff: Backoff = DEFAULT_BACKOFF,
    clock: Clock | None = None,
    rand: Callable[[], float] = random.random,
    min_watch_timeout: int = MIN_WATCH_TIMEOUT,
) -> NoReturn:
    """Keep the consumer in step with the collection at `path` until cancelled. See the module docstring."""
    clock = clock or SystemClock()
    failures = 0
    resource_version: str | None = None  # None: a list is needed
    try:
        while True:
            phase = "list" if resource_version is None else "watch"
            try:
                if resource_version is None:
                    # A consistent read (no resourceVersion): the snapshot is never older than what we saw last.
                    listed = await client.list(
                        path, field_selector=field_selector, label_selector=label_selector, limit=page_size
                    )
                    listed_rv = str((listed.get("metadata") or {}).get("resourceVersion") or "")
                    if not listed_rv:
                        raise ApiUnavailable(f"list of {path} carried no resourceVersion")
                    objects = tuple(listed.get("items") or ())
                    await on_event(Synced(objects, listed_rv))
                    resource_version = listed_rv
                    log.info("list synced path=%s resource_version=%s items=%d", path, listed_rv, len(objects))
                    phase = "watch"
                started = clock.monotonic()
                seen = 0
                timeout = int(min_watch_timeout * (1.0 + rand()))
                events = client.watch(
                    path,
                    resource_version=resource_version,
                    field_selector=field_selector,
                    label_selector=label_selector,
                    timeout_seconds=timeout,
                )
                async with contextlib.aclosing(events):
                    async for event in events:
                        seen += 1
                        failures = 0
                        change = _CHANGES.get(event.type)
                        if change is not None:
                            await on_event(change(event.object))
                        if event.resource_version is not None:
                            resource_version = event.resource_version
                if seen == 0 and clock.monotonic() - started < SHORT_WATCH:
                    raise ApiUnavailable(f"very short watch of {path}: ended at once without events")
                failures = 0
                # Routine: the server ends every watch after timeoutSeconds.
                log.debug("watch restarted path=%s reason=%s resource_version=%s", path, "ended", resource_version)
            except Gone as exc:
                failures += 1
                resource_version = None
                # The first Gone relists at once; Gone again before any progress backs off like any failure.
                delay = 0.0 if failures == 1 and phase == "watch" else backoff.delay(failures, rand())
                log.info(
                    "watch restarted path=%s reason=%s phase=%s backoff=%.2f message=%s",
                    path,
                    "gone",
                    phase,
                    delay,
                    exc.message,
                )
                if delay:
                    await clock.sleep(delay)
            except (ApiError, ApiUnavailable) as exc:
                failures += 1
                delay = backoff.delay(failures, rand())
                log.warning(
                    "watch restarted path=%s reason=%s phase=%s failures=%d backoff=%.2f error=%s",
                    path,
                    type(exc).__name__,
                    phase,
                    failures,
                    delay,
                    exc,
                )
                await clock.sleep(delay)
    except asyncio.CancelledError:
        log.info("reflector stopped path=%s", path)
        raise
    except Exception:
        log.exception("reflector failed path=%s", path)
        raise
