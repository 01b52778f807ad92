"""One line per step on stderr, as the install's progress does: a cold build takes minutes, a full run tens."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Progress:
    write: Callable[[str], None] = field(default=_stderr)

    def step(self, message: str) -> None:
        self.write(f"[nodeagent conformance] {message}")
