"""The fuzz engine: hypothesis draws the cases, each case runs under a time limit and a memory cap, and every
outcome that is not a documented error of the target is a crash, recorded with its input.

A crash is one of:
- an exception the target does not document (each boundary of the project has its own small exception tree: a
  clear, typed error is the right answer to bad input, anything else is a bug);
- a hang: a case that uses more than `case_seconds` of CPU (SIGVTALRM, so pytest-timeout's SIGALRM is left alone);
  a case stuck inside C code (where no signal handler runs) is caught by the runner's hard watchdog instead;
- unbounded memory: a `MemoryError` under an address-space cap (RLIMIT_AS at `memory_bytes` above what the process
  maps when the case starts; re-based per case, since the allocator's arenas grow the mapping slowly over thousands
  of cases without any object being kept: the run reports the mapping at each target's start and end).

Cases never raise into hypothesis, so a run always makes its full number of cases (no shrinking, no database): the
figures of two runs with one seed compare.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import resource
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

DEFAULT_CASE_SECONDS = 5.0
DEFAULT_MEMORY_BYTES = 1 << 30
CHUNK = 500
_INPUT_CHARS = 4000


class CaseTimeout(BaseException):
    """Raised into a case that used up its CPU time (a BaseException, so `except Exception` in the target cannot eat
    it)."""


@dataclass(frozen=True)
class Target:
    """One fuzz target: how cases are drawn, what one case runs, and the errors the target documents."""

    name: str
    strategy: st.SearchStrategy[Any]
    run: Callable[[Any], None]
    expected: tuple[type[BaseException], ...]
    description: str = ""


@dataclass(frozen=True)
class Crash:
    target: str
    kind: str  # "exception", "hang" or "memory"
    error: str  # "KeyError: 'name'"
    where: str  # the innermost frame in the project's code: "nodeagent/x.py:12 in f"
    input: str  # repr of the case, cut at _INPUT_CHARS

    @property
    def signature(self) -> str:
        """What tells two crashes apart: the kind, the exception type and where it was raised."""
        return f"{self.kind} {self.error.split(':', 1)[0]} at {self.where}"


@dataclass
class Result:
    target: str
    cases: int = 0
    crashes: list[Crash] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    mapped_mib: tuple[int, int] = (0, 0)  # the process's mapping at the target's start and end

    @property
    def unique(self) -> dict[str, Crash]:
        """The first crash of each signature."""
        found: dict[str, Crash] = {}
        for crash in self.crashes:
            found.setdefault(crash.signature, crash)
        return found

    def as_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "cases": self.cases,
            "crashes": len(self.crashes),
            "unique_crashes": len(self.unique),
            "seconds": round(self.seconds, 1),
            "cpu_seconds": round(self.cpu_seconds, 1),
            "mapped_mib": list(self.mapped_mib),
            "found": [dataclasses.asdict(c) for c in self.unique.values()],
        }


_PROJECT_FRAME = re.compile(r"/(nodeagent|cni|csi|cri|pleg|eviction)/")


def _where(exc: BaseException) -> str:
    """The innermost traceback frame in the project's packages (else the innermost frame at all)."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if _PROJECT_FRAME.search(f.filename) and "/tests/" not in f.filename]
    if not (ours or frames):
        return "?"
    frame = (ours or frames)[-1]
    match = _PROJECT_FRAME.search(frame.filename)
    name = frame.filename[match.start() + 1 :] if match else frame.filename.rsplit("/", 1)[-1]
    return f"{name}:{frame.lineno} in {frame.name}"


def _shown(case: Any) -> str:
    text = repr(case)
    return text if len(text) <= _INPUT_CHARS else text[:_INPUT_CHARS] + f"... ({len(text)} chars)"


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise CaseTimeout


def run_case(
    target: Target,
    case: Any,
    *,
    case_seconds: float = DEFAULT_CASE_SECONDS,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
) -> Crash | None:
    """Run one case; the crash it makes, or None when the target answered or refused it with a documented error."""
    previous = signal.signal(signal.SIGVTALRM, _on_alarm)
    try:
        with memory_cap(memory_bytes):
            signal.setitimer(signal.ITIMER_VIRTUAL, case_seconds)
            try:
                target.run(case)
            finally:
                signal.setitimer(signal.ITIMER_VIRTUAL, 0)
    except CaseTimeout:
        return Crash(target.name, "hang", f"CaseTimeout: over {case_seconds} s of CPU", "?", _shown(case))
    except MemoryError as exc:
        return Crash(target.name, "memory", f"MemoryError: {exc}", _where(exc), _shown(case))
    except target.expected:
        return None
    except Exception as exc:
        return Crash(target.name, "exception", f"{type(exc).__name__}: {exc}"[:500], _where(exc), _shown(case))
    finally:
        signal.signal(signal.SIGVTALRM, previous)
    return None


def _mapped_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


@contextlib.contextmanager
def memory_cap(extra_bytes: int) -> Iterator[None]:
    """Cap the address space at what is mapped now plus `extra_bytes` (the soft limit, restored afterwards)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _mapped_bytes() + extra_bytes
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def run_target(
    target: Target,
    *,
    cases: int,
    seed: int,
    case_seconds: float = DEFAULT_CASE_SECONDS,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    cpu_budget: float | None = None,
    before_case: Callable[[], None] | None = None,
) -> Result:
    """Draw up to `cases` cases from the target's strategy (seeded) and run each; never raises for a crash.

    The cases are drawn in chunks of `CHUNK`, each a hypothesis run of its own (seeded from `seed` and the chunk's
    number): hypothesis keeps a tree of every choice a run made, which for ten thousand large inputs grows to
    gigabytes. With `cpu_budget` (seconds of this process's CPU time), no chunk starts once it is spent."""
    result = Result(target.name)

    def chunk(number: int, size: int) -> None:
        @settings(
            max_examples=size,
            database=None,
            deadline=None,
            derandomize=False,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
        )
        @hypothesis.seed(seed * 1_000_003 + number)
        @given(target.strategy)
        def body(case: Any) -> None:
            if before_case is not None:
                before_case()
            result.cases += 1
            crash = run_case(target, case, case_seconds=case_seconds, memory_bytes=memory_bytes)
            if crash is not None:
                result.crashes.append(crash)

        body()

    started, cpu_started, mapped = time.monotonic(), time.process_time(), _mapped_bytes()
    number = 0
    while result.cases < cases:
        if cpu_budget is not None and time.process_time() - cpu_started >= cpu_budget:
            break
        before = result.cases
        chunk(number, min(CHUNK, cases - result.cases))
        number += 1
        if result.cases == before:  # the strategy has no more distinct cases
            break
    result.seconds = time.monotonic() - started
    result.cpu_seconds = time.process_time() - cpu_started
    result.mapped_mib = (mapped >> 20, _mapped_bytes() >> 20)
    return result
