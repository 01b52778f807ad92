"""The agent's side of signal injection: `nodeagent run --eviction-signal-injection FILE`.

The file is read at start (a bad one stops the agent) and again whenever it changes, so that an experiment runner
can start the agent first, bring its pods up, and only then set the start time: second 0 of the scenario is when
the pods run, not when the agent started. A file that turns bad later is logged and the last good one stays.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import datetime
from pathlib import Path

from eviction.injection import InjectionError, SignalInjection, parse_injection
from eviction.signals import Observation, Observations, Signal
from nodeagent.config.quantity import parse_quantity

log = logging.getLogger(__name__)


def read_injection(path: Path) -> SignalInjection:
    """Raises InjectionError (also for a file that cannot be read or is not JSON)."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InjectionError([f"{path}: {exc}"]) from exc
    return parse_injection(document, parse_quantity)


def _describe(injection: SignalInjection) -> str:
    return ",".join(str(s) for s in injection.signals) or "none"


class InjectionFile:
    """An `Injector` over a file that may be rewritten while the agent runs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp = self._stat()
        self.injection = read_injection(path)
        log.warning(
            "eviction signals are injected: the eviction manager decides on this file, not on what the node "
            "observes path=%s signals=%s start=%s",
            path,
            _describe(self.injection),
            self.injection.start.isoformat() if self.injection.start else "not-yet",
        )

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def _reload(self) -> None:
        stamp = self._stat()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self.injection = read_injection(self.path)
        except InjectionError as exc:
            log.warning("eviction signal injection not reloaded, the last one stays path=%s error=%s", self.path, exc)
            return
        log.warning(
            "eviction signal injection reloaded path=%s signals=%s start=%s",
            self.path,
            _describe(self.injection),
            self.injection.start.isoformat() if self.injection.start else "not-yet",
        )

    def apply(self, observations: Observations, now: datetime) -> dict[Signal, Observation]:
        self._reload()
        return self.injection.apply(observations, now)
