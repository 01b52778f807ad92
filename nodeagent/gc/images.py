"""The image garbage collector (upstream pkg/kubelet/images/image_gc_manager.go realImageGCManager), over CRI.

The decisions are `eviction.imagegc`'s; this manager keeps the image records in memory (first detected, last used,
size, pinned: lost on restart, as upstream's), reads the runtime and removes images:

- `run()`: every ImageGCPeriod (5 min; the clock is injected, the period a parameter so tests can shorten it) a
  `garbage_collect` pass: images unused for longer than imageMaximumGCAge go (reason "age"); then, when the image
  filesystem is at or above imageGCHighThresholdPercent, the least recently used images older than
  imageMinimumGCAge go until it is back at imageGCLowThresholdPercent (reason "space"). Freeing too little records
  upstream's `FreeDiskSpaceFailed` event; a pass that fails twice in a row records `ImageGCFailed`.
- `delete_unused_images()`: the eviction manager's node-level reclaim (upstream's DeleteUnusedImages): every unused
  image past the minimum age goes.

Never removed: an image any container uses (exited containers included, as upstream's GetPods(all)), an image the
runtime pins, and the sandbox image (read from the runtime's verbose Status; containerd also pins it).
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from cri.errors import CRIError
from cri.v1 import api_pb2
from eviction import imagegc
from eviction.imagegc import ImagePolicy, ImageRecord, SeenImage
from nodeagent.clock import Clock
from nodeagent.config import KubeletConfiguration
from nodeagent.gc.errors import ImageGCError
from nodeagent.gc.metrics import ImageGCMetrics
from nodeagent.stats.types import Summary

log = logging.getLogger(__name__)

# (capacity, available) of the image filesystem in bytes; None when the runtime reports none.
ImageFsStats = Callable[[], Awaitable[tuple[int, int] | None]]
# (type, reason, message) of an event on the Node.
NodeEvent = Callable[[str, str, str], None]
# What DeleteUnusedImages asks to free: everything (upstream's math.MaxInt64).
EVERYTHING = 2**63 - 1


class ImageLister(Protocol):
    async def list_images(
        self, filter: api_pb2.ImageFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.Image]: ...

    async def remove_image(self, image: api_pb2.ImageSpec, *, timeout: float | None = None) -> None: ...


class ContainerLister(Protocol):
    async def list_containers(
        self, filter: api_pb2.ContainerFilter | None = None, *, timeout: float | None = None
    ) -> list[api_pb2.Container]: ...

    async def status(self, verbose: bool = False, *, timeout: float | None = None) -> api_pb2.StatusResponse: ...


def _no_event(type_: str, reason: str, message: str) -> None:
    del type_, reason, message


def sandbox_image_from_status(status: api_pb2.StatusResponse) -> str | None:
    """The sandbox image the runtime configures: containerd's verbose Status carries its CRI config as JSON."""
    raw = status.info.get("config")
    if not raw:
        return None
    try:
        config = json.loads(raw)
    except ValueError:
        return None
    image = config.get("sandboxImage") if isinstance(config, dict) else None
    return image if isinstance(image, str) and image else None


def _normalize(reference: str) -> str:
    """A reference as containerd names it: Docker Hub's short forms expanded, a missing tag made `latest`."""
    name, at, digest = reference.partition("@")
    first, slash, _ = name.partition("/")
    if not slash or ("." not in first and ":" not in first and first != "localhost"):
        name = f"docker.io/{name}" if slash else f"docker.io/library/{name}"
    if not at and ":" not in name.rpartition("/")[2]:
        name += ":latest"
    return f"{name}{at}{digest}"


def is_sandbox_image(image: api_pb2.Image, sandbox_image: str | None) -> bool:
    if not sandbox_image:
        return False
    wanted = _normalize(sandbox_image)
    names = [*image.repo_tags, *image.repo_digests]
    return sandbox_image == image.id or any(_normalize(n) == wanted for n in names)


class ImageGCManager:
    def __init__(
        self,
        images: ImageLister,
        runtime: ContainerLister,
        *,
        image_fs: ImageFsStats,
        policy: ImagePolicy,
        clock: Clock,
        metrics: ImageGCMetrics | None = None,
        record_node_event: NodeEvent = _no_event,
    ) -> None:
        self._images = images
        self._runtime = runtime
        self._image_fs = image_fs
        self.policy = policy
        self._clock = clock
        self._metrics = metrics if metrics is not None else ImageGCMetrics()
        self._event = record_node_event
        self.records: dict[str, ImageRecord] = {}
        self._sandbox_image: str | None = None
        self._began = clock.wall()  # upstream's beganGC: when the kubelet started collecting

    async def _sandbox(self) -> str | None:
        if self._sandbox_image is None:
            try:
                self._sandbox_image = sandbox_image_from_status(await self._runtime.status(verbose=True)) or ""
            except CRIError as exc:
                log.warning("image gc cannot read the sandbox image from the runtime status error=%s", exc)
                return None
            log.info("image gc sandbox image=%s", self._sandbox_image or "unknown")
        return self._sandbox_image or None

    async def detect_images(self, now: datetime.datetime) -> frozenset[str]:
        """Refresh the records from the runtime (upstream's detectImages); the ids of the images in use."""
        try:
            images = await self._images.list_images()
            containers = await self._runtime.list_containers()
        except CRIError as exc:
            raise ImageGCError(f"failed to list images or containers: {exc}") from exc
        sandbox = await self._sandbox()
        ids = {i.id for i in images}
        in_use: set[str] = set()
        for c in containers:
            for ref in (c.image_ref, c.image.image):
                if ref:
                    in_use.add(ref)
        # A container may name its image by a tag or digest rather than by id.
        for image in images:
            if in_use.intersection((*image.repo_tags, *image.repo_digests)):
                in_use.add(image.id)
        seen = [SeenImage(id=i.id, size=i.size, pinned=i.pinned, sandbox=is_sandbox_image(i, sandbox)) for i in images]
        self.records = imagegc.detect(self.records, seen, frozenset(in_use), now)
        return frozenset(in_use & ids)

    async def _eviction_order(self, now: datetime.datetime) -> list[ImageRecord]:
        in_use = await self.detect_images(now)
        return imagegc.eviction_order(self.records, in_use)

    async def _free_image(self, record: ImageRecord, reason: str) -> CRIError | None:
        log.info("image gc removing image id=%s size=%d reason=%s", record.id, record.size, reason)
        try:
            await self._images.remove_image(api_pb2.ImageSpec(image=record.id))
        except CRIError as exc:
            log.warning("image gc failed to remove image id=%s error=%s", record.id, exc)
            return exc
        self.records.pop(record.id, None)
        self._metrics.image_collected(reason)
        return None

    async def _free_space(self, bytes_to_free: int, order: Sequence[ImageRecord], now: datetime.datetime) -> int:
        """Upstream's freeSpace: remove eligible images in order until enough is freed, going on past a failed one;
        the bytes freed. Raises ImageGCError when a removal failed (after trying the others)."""
        errors: list[CRIError] = []
        freed = 0
        for record in imagegc.eligible_for_space(order, self.policy, now=now):
            failed = await self._free_image(record, imagegc.REASON_SPACE)
            if failed is not None:
                errors.append(failed)
                continue
            freed += record.size
            if freed >= bytes_to_free:
                break
        if errors:
            raise ImageGCError(
                f"wanted to free {bytes_to_free} bytes, but freed {freed} bytes space with errors in image deletion: "
                + "; ".join(str(e) for e in errors)
            )
        return freed

    async def garbage_collect(self) -> None:
        """One periodic pass (upstream's GarbageCollect). Raises ImageGCError."""
        now = self._clock.wall()
        order = await self._eviction_order(now)
        old = imagegc.old_images(order, self.policy, now=now, began=self._began)
        errors = [e for r in old if (e := await self._free_image(r, imagegc.REASON_AGE)) is not None]
        if errors:
            raise ImageGCError(
                f"wanted to free images older than {self.policy.max_age}, encountered errors in image deletion: "
                + "; ".join(str(e) for e in errors)
            )
        gone = {r.id for r in old}
        order = [r for r in order if r.id not in gone]
        try:
            fs = await self._image_fs()
        except Exception as exc:  # the stats provider's own errors: this pass fails, the next tries again
            raise ImageGCError(f"failed to get image stats: {exc}") from exc
        capacity, available = fs if fs is not None else (0, 0)
        try:
            amount = imagegc.amount_to_free(capacity, available, self.policy)
        except imagegc.InvalidCapacity as exc:
            self._event("Warning", imagegc.INVALID_DISK_CAPACITY, str(exc))
            raise ImageGCError(str(exc)) from exc
        if amount <= 0:
            return
        log.info(
            "image gc disk usage on image filesystem is over the high threshold, trying to free bytes down to the low "
            "threshold usage=%d high_threshold=%d amount_to_free=%d low_threshold=%d",
            imagegc.usage_percent(capacity, available),
            self.policy.high_threshold_percent,
            amount,
            self.policy.low_threshold_percent,
        )
        freed = await self._free_space(amount, order, now)
        if freed < amount:
            message = imagegc.free_disk_space_failed_message(amount, freed)
            self._event("Warning", imagegc.FREE_DISK_SPACE_FAILED, message)
            raise ImageGCError(message)

    async def delete_unused_images(self) -> None:
        """Remove every unused image past the minimum age: the eviction manager's node-level reclaim (upstream's
        DeleteUnusedImages). Raises ImageGCError."""
        log.info("image gc attempting to delete unused images")
        now = self._clock.wall()
        order = await self._eviction_order(now)
        freed = await self._free_space(EVERYTHING, order, now)
        log.info("image gc deleted unused images freed_bytes=%d", freed)

    async def run(self, period: float = imagegc.IMAGE_GC_PERIOD.total_seconds()) -> None:
        """The periodic pass. As upstream's kubelet: a first failure is only logged (stats may not be ready yet);
        each further failure in a row also records ImageGCFailed on the Node."""
        failed_before = False
        while True:
            try:
                await self.garbage_collect()
            except ImageGCError as exc:
                if failed_before:
                    log.error("image garbage collection failed multiple times in a row error=%s", exc)
                    self._event("Warning", imagegc.IMAGE_GC_FAILED, str(exc))
                else:
                    log.warning("image garbage collection failed once, stats may not be ready yet error=%s", exc)
                failed_before = True
            else:
                if failed_before:
                    log.info("image garbage collection succeeded")
                failed_before = False
            await self._clock.sleep(period)


def image_policy(config: KubeletConfiguration) -> ImagePolicy:
    """The policy the config sets (imageGCHigh/LowThresholdPercent, imageMinimum/MaximumGCAge)."""
    return ImagePolicy(
        high_threshold_percent=config.image_gc_high_threshold_percent,
        low_threshold_percent=config.image_gc_low_threshold_percent,
        min_age=config.image_minimum_gc_age,
        max_age=config.image_maximum_gc_age,
    )


def summary_image_fs(summary: Callable[[], Awaitable[Summary]]) -> ImageFsStats:
    """The image filesystem's capacity and availability from the stats summary (upstream's ImageFsStats), so the
    collector measures nothing the summary provider does not."""

    async def read() -> tuple[int, int] | None:
        runtime = (await summary()).node.runtime
        fs = runtime.image_fs if runtime is not None else None
        if fs is None or fs.capacity_bytes is None or fs.available_bytes is None:
            return None
        return fs.capacity_bytes, fs.available_bytes

    return read
