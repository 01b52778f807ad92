"""How often the collectors run. Upstream's periods (ImageGCPeriod 5 min, ContainerGCPeriod 1 min) are not kubelet
config fields; NODEAGENT_IMAGE_GC_PERIOD and NODEAGENT_CONTAINER_GC_PERIOD (seconds) shorten them for integration
tests, which cannot wait five minutes for a pass."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from eviction.containergc import CONTAINER_GC_PERIOD
from eviction.imagegc import IMAGE_GC_PERIOD

log = logging.getLogger(__name__)

IMAGE_GC_PERIOD_ENV = "NODEAGENT_IMAGE_GC_PERIOD"
CONTAINER_GC_PERIOD_ENV = "NODEAGENT_CONTAINER_GC_PERIOD"


def _seconds(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if value <= 0:
        log.warning(
            "ignoring a garbage collection period that is not a positive number variable=%s value=%s", name, raw
        )
        return default
    return value


def gc_periods(environ: Mapping[str, str]) -> tuple[float, float]:
    """(image GC period, container GC period) in seconds."""
    return (
        _seconds(environ, IMAGE_GC_PERIOD_ENV, IMAGE_GC_PERIOD.total_seconds()),
        _seconds(environ, CONTAINER_GC_PERIOD_ENV, CONTAINER_GC_PERIOD.total_seconds()),
    )
