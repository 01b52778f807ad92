"""Problems with static pod manifests, reported once each while they last.

The file source re-reads its directory every 20 s and the URL source polls every 20 s; a broken manifest would be
logged (and, with an apiserver, posted as an event) on every read. `ProblemReporter` remembers what it reported per
origin (a file path, a URL, an item of a URL's list) and reports again only when the problem changes, so a user
sees each mistake once, and again after an edit that did not fix it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ManifestProblem:
    origin: str  # where the manifest came from: a file path, a URL, "URL items[2]"
    message: str  # why it is not used, in upstream's words ("couldn't parse as pod(...)", "invalid pod: [...]")

    def __str__(self) -> str:
        return f"{self.origin}: {self.message}"


ProblemSink = Callable[[ManifestProblem], None]


class ProblemReporter:
    """Passes each new or changed problem to the sink; a problem that went away is logged as resolved."""

    def __init__(self, sink: ProblemSink) -> None:
        self._sink = sink
        self._current: dict[str, str] = {}

    def report(self, problems: Iterable[ManifestProblem]) -> None:
        """The complete set of problems of one read: what is not in it is resolved."""
        current = {p.origin: p.message for p in problems}
        for origin, message in current.items():
            if self._current.get(origin) != message:
                self._sink(ManifestProblem(origin, message))
        for origin in sorted(self._current.keys() - current.keys()):
            log.info("static pod manifest problem resolved origin=%s", origin)
        self._current = current

    @property
    def current(self) -> dict[str, str]:
        return dict(self._current)
