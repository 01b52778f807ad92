"""Every version of the scenario's pods that a watch on its namespace delivers, in order."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

from nodeagent.kube import paths
from nodeagent.kube.client import KubeClient
from nodeagent.kube.errors import Gone
from tests.differential.waits import satisfied

log = logging.getLogger(__name__)

Obj = dict[str, Any]


@dataclass
class Recorder:
    admin: KubeClient
    namespace: str
    history: list[tuple[str, Obj | None]] = field(default_factory=list)  # (pod name, object; None when deleted)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _task: asyncio.Task[None] | None = None
    _ready: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"differential-watch-{self.namespace}")
        await asyncio.wait_for(self._ready.wait(), 30)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        listed = await self.admin.list(paths.pods(self.namespace))
        version = listed["metadata"]["resourceVersion"]
        self._ready.set()
        while True:
            try:
                stream = self.admin.watch(paths.pods(self.namespace), resource_version=version, timeout_seconds=600)
                async with contextlib.aclosing(stream) as events:
                    async for event in events:
                        obj = event.object
                        version = (obj.get("metadata") or {}).get("resourceVersion") or version
                        if event.type == "BOOKMARK":
                            continue
                        name = obj["metadata"]["name"]
                        await self._append(name, None if event.type == "DELETED" else obj)
            except Gone:
                log.warning("differential watch expired namespace=%s", self.namespace)
                listed = await self.admin.list(paths.pods(self.namespace))
                version = listed["metadata"]["resourceVersion"]

    async def _append(self, name: str, obj: Obj | None) -> None:
        async with self._changed:
            self.history.append((name, obj))
            self._changed.notify_all()

    def latest(self, upto: int) -> dict[str, Obj | None]:
        seen: dict[str, Obj | None] = {}
        for name, obj in self.history[:upto]:
            seen[name] = obj
        return seen

    async def wait(self, pod: str, args: Obj, timeout: float) -> int | None:
        """The length of the history at the first event (from the start) after which `pod` satisfies `args`;
        None on timeout. Checked event by event, so the cut is exact however many events arrived at once."""
        cursor = 0
        current: dict[str, Obj | None] = {}

        def scan() -> int | None:
            nonlocal cursor
            while cursor < len(self.history):
                name, obj = self.history[cursor]
                current[name] = obj
                cursor += 1
                if name == pod and satisfied(args, obj):
                    return cursor
            return None

        deadline = asyncio.get_running_loop().time() + timeout
        async with self._changed:
            # Satisfied by what is already there? Only by the pod's latest version, not a past one.
            while cursor < len(self.history):
                name, obj = self.history[cursor]
                current[name] = obj
                cursor += 1
            if satisfied(args, current.get(pod)) and (pod in current or args.get("gone")):
                return cursor
            while True:
                found = scan()
                if found is not None:
                    return found
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    return None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), left)
