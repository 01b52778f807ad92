"""Image garbage collection as pure decisions: upstream's realImageGCManager (pkg/kubelet/images) without the I/O.

The manager keeps one record per image it has seen (`detect`: first detected, last seen in use, size, pinned), as
upstream does in memory, and decides from them:

- `eviction_order`: the images that may go at all, least recently used first (never used before used; ties by first
  detection). An image a container uses (any container, exited ones included, as upstream's GetPods(all)), an image
  the runtime pins, and the sandbox image are never candidates;
- `old_images`: with imageMaximumGCAge set, the candidates unused for longer than it, once the kubelet has run for
  longer than it (upstream's freeOldImages; metric reason "age");
- `amount_to_free`: on the image filesystem, at or above imageGCHighThresholdPercent used, the bytes that bring it
  back to imageGCLowThresholdPercent (upstream's GarbageCollect);
- `eligible_for_space`: the candidates, in order, older than imageMinimumGCAge since first detected (a just-pulled
  image is about to be used); the caller removes them until enough is freed (metric reason "space"). The eviction
  manager's node-level reclaim (`DeleteUnusedImages`) asks for everything eligible.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

# Upstream's defaults: imageGCHighThresholdPercent 85, imageGCLowThresholdPercent 80, imageMinimumGCAge 2m,
# imageMaximumGCAge 0 (off); the manager runs every ImageGCPeriod, 5 min.
DEFAULT_HIGH_THRESHOLD_PERCENT = 85
DEFAULT_LOW_THRESHOLD_PERCENT = 80
DEFAULT_MIN_AGE = timedelta(minutes=2)
IMAGE_GC_PERIOD = timedelta(minutes=5)

# kubelet_image_garbage_collected_total's reason label (upstream's ImageGarbageCollectedTotalReason*).
REASON_AGE = "age"
REASON_SPACE = "space"

# Node events (upstream's pkg/kubelet/events).
FREE_DISK_SPACE_FAILED = "FreeDiskSpaceFailed"
IMAGE_GC_FAILED = "ImageGCFailed"
INVALID_DISK_CAPACITY = "InvalidDiskCapacity"


class InvalidCapacity(ValueError):
    """The image filesystem reports no capacity: nothing can be decided (upstream's InvalidDiskCapacity event)."""

    def __init__(self) -> None:
        super().__init__("invalid capacity 0 on image filesystem")


@dataclass(frozen=True)
class ImagePolicy:
    high_threshold_percent: int = DEFAULT_HIGH_THRESHOLD_PERCENT
    low_threshold_percent: int = DEFAULT_LOW_THRESHOLD_PERCENT
    min_age: timedelta = DEFAULT_MIN_AGE
    max_age: timedelta = timedelta(0)  # 0: no age-based collection


@dataclass(frozen=True)
class SeenImage:
    """One image as the runtime lists it."""

    id: str
    size: int
    pinned: bool = False
    sandbox: bool = False  # the runtime's sandbox (pause) image


@dataclass(frozen=True)
class ImageRecord:
    id: str
    size: int
    first_detected: datetime
    last_used: datetime | None = None  # None: never seen in use (upstream's zero time, older than any)
    pinned: bool = False
    sandbox: bool = False


Records = Mapping[str, ImageRecord]


def detect(
    records: Records, images: Iterable[SeenImage], in_use: frozenset[str], now: datetime
) -> dict[str, ImageRecord]:
    """Upstream's detectImages: a new image is first detected now; one in use is last used now; size and pinned
    follow the runtime; an image the runtime no longer lists is forgotten."""
    updated: dict[str, ImageRecord] = {}
    for image in images:
        old = records.get(image.id)
        record = old or ImageRecord(id=image.id, size=image.size, first_detected=now)
        record = replace(record, size=image.size, pinned=image.pinned, sandbox=image.sandbox)
        if image.id in in_use:
            record = replace(record, last_used=now)
        updated[image.id] = record
    return updated


def _order_key(record: ImageRecord) -> tuple[bool, datetime, datetime]:
    # Never used sorts before any use (upstream compares zero times); ties go to the earlier detected.
    used = record.last_used
    return (used is not None, used or record.first_detected, record.first_detected)


def eviction_order(records: Records, in_use: frozenset[str]) -> list[ImageRecord]:
    """The images that may be removed, least recently used first (upstream's imagesInEvictionOrder)."""
    candidates = [r for r in records.values() if r.id not in in_use and not r.pinned and not r.sandbox]
    return sorted(candidates, key=_order_key)


def old_images(
    order: Sequence[ImageRecord], policy: ImagePolicy, *, now: datetime, began: datetime
) -> list[ImageRecord]:
    """Upstream's freeOldImages: with a maximum age, the candidates unused for longer than it. Nothing until the
    kubelet itself has run for longer than it, since it cannot know how long an image was unused before."""
    if policy.max_age <= timedelta(0) or now - began <= policy.max_age:
        return []
    return [r for r in order if r.last_used is None or now - r.last_used > policy.max_age]


def usage_percent(capacity: int, available: int) -> int:
    """The used share of the filesystem, as upstream rounds it: 100 - floor(available * 100 / capacity)."""
    if capacity <= 0:
        raise InvalidCapacity()
    return 100 - min(available, capacity) * 100 // capacity


def amount_to_free(capacity: int, available: int, policy: ImagePolicy) -> int:
    """Bytes to free to bring the image filesystem down to the low threshold; 0 below the high threshold. Raises
    InvalidCapacity for a capacity of 0."""
    available = min(available, capacity) if capacity > 0 else available
    if usage_percent(capacity, available) < policy.high_threshold_percent:
        return 0
    return capacity * (100 - policy.low_threshold_percent) // 100 - available


def eligible_for_space(order: Sequence[ImageRecord], policy: ImagePolicy, *, now: datetime) -> list[ImageRecord]:
    """The candidates upstream's freeSpace removes, in order: not used at or after `now`, and detected at least the
    minimum age ago (a just-pulled image may be about to start a container)."""
    return [r for r in order if (r.last_used is None or r.last_used < now) and now - r.first_detected >= policy.min_age]


def images_to_free(eligible: Sequence[ImageRecord], bytes_to_free: int) -> list[ImageRecord]:
    """The prefix of `eligible` that frees `bytes_to_free` if every removal succeeds (all of it when it cannot)."""
    chosen: list[ImageRecord] = []
    freed = 0
    for record in eligible:
        chosen.append(record)
        freed += record.size
        if freed >= bytes_to_free:
            break
    return chosen


def free_disk_space_failed_message(amount: int, freed: int) -> str:
    """The FreeDiskSpaceFailed event's message and GarbageCollect's error, upstream's words."""
    return (
        f"Failed to garbage collect required amount of images. Attempted to free {amount} bytes, "
        f"but only found {freed} bytes eligible to free."
    )


__all__ = [
    "DEFAULT_HIGH_THRESHOLD_PERCENT",
    "DEFAULT_LOW_THRESHOLD_PERCENT",
    "DEFAULT_MIN_AGE",
    "FREE_DISK_SPACE_FAILED",
    "IMAGE_GC_FAILED",
    "IMAGE_GC_PERIOD",
    "INVALID_DISK_CAPACITY",
    "REASON_AGE",
    "REASON_SPACE",
    "ImagePolicy",
    "ImageRecord",
    "InvalidCapacity",
    "Records",
    "SeenImage",
    "amount_to_free",
    "detect",
    "eligible_for_space",
    "eviction_order",
    "free_disk_space_failed_message",
    "images_to_free",
    "old_images",
    "usage_percent",
]
