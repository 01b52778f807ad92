"""What each shard has done, from the attempts on disk, and what is left to run.

A shard's runs are its attempts, `shards/NN/attempt-M/` (the report directory of one ginkgo run: the framework's
`junit_01.xml`, `ginkgo.log`, and `attempt.json`, what was asked and how long it took). A spec is done once an
attempt's JUnit holds an end for it: passed, failed (timed out, panicked or aborted too), or skipped by the spec
itself with a reason. It is missing when no attempt has one:
- the attempt was killed before ginkgo wrote its report (SIGKILL, a reboot): none of its specs has an end;
- ginkgo was interrupted (one SIGINT: it cleans up and still writes the report): the running specs are
  `interrupted` and the ones not yet started `skipped` with the bare message "skipped", as specs left out by the
  focus are; neither is an end.
The latest attempt's end wins, so a spec run again (`--resume` after a fix) reports its last result.

ginkgo runs in a session of its own. When the driver is killed outright (SIGKILL), ginkgo dies at its next line of
output (SIGPIPE; seen on 2026-11-28: ginkgo died at once, one e2e.test process it had started ran on a little, and
there was no report, so the whole attempt ran again); but in parallel a spec's output comes only when it ends,
minutes later for some. Its PID is in
`ginkgo.pid`: a resume refuses to start while an attempt that never recorded its end still has that ginkgo alive,
rather than run the same specs twice at once against one cluster.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeagent.conformance.errors import ReportError
from nodeagent.conformance.junit import Outcome, SpecResult, read_junit
from nodeagent.conformance.shards import Shard

SHARDS_DIR = "shards"
ATTEMPT_FILE = "attempt.json"
GINKGO_PID_FILE = "ginkgo.pid"
_ATTEMPT = re.compile(r"^attempt-(\d+)$")
# What an attempt's PID runs: the ginkgo CLI (e2e.test's runs), or e2e_node.test itself (the node suite runs alone).
_PROGRAMS = (b"ginkgo", b"e2e_node.test")


@dataclass(frozen=True)
class AttemptRecord:
    """What `attempt.json` says: the specs asked, when, and (once ginkgo ended) its exit code and seconds."""

    asked: tuple[str, ...]
    procs: int
    started: str
    version: str
    exit_code: int | None = None
    seconds: float | None = None

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "asked": list(self.asked),
            "procs": self.procs,
            "started": self.started,
            "version": self.version,
            "exit_code": self.exit_code,
            "seconds": self.seconds,
        }
        return json.dumps(data, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> AttemptRecord:
        data = json.loads(text)
        return cls(
            asked=tuple(data["asked"]),
            procs=int(data["procs"]),
            started=str(data["started"]),
            version=str(data.get("version", "")),
            exit_code=data.get("exit_code"),
            seconds=data.get("seconds"),
        )


@dataclass(frozen=True)
class Attempt:
    number: int
    report_dir: Path
    record: AttemptRecord | None
    results: tuple[SpecResult, ...] | None  # None: no JUnit report (killed before ginkgo wrote it)


def shard_dir(root: Path, index: int) -> Path:
    return root / SHARDS_DIR / f"{index:02d}"


def attempt_dir(root: Path, index: int, number: int) -> Path:
    return shard_dir(root, index) / f"attempt-{number}"


def read_attempts(root: Path, index: int) -> list[Attempt]:
    """The shard's attempts on disk, oldest first."""
    base = shard_dir(root, index)
    numbered = []
    for child in base.iterdir() if base.is_dir() else ():
        match = _ATTEMPT.match(child.name)
        if match is not None and child.is_dir():
            numbered.append((int(match.group(1)), child))
    attempts = []
    for number, path in sorted(numbered):
        record_path = path / ATTEMPT_FILE
        try:
            record = AttemptRecord.from_json(record_path.read_text()) if record_path.exists() else None
        except (ValueError, KeyError, TypeError):
            record = None
        try:
            results: tuple[SpecResult, ...] | None = tuple(read_junit(path))
        except ReportError:
            results = None
        attempts.append(Attempt(number, path, record, results))
    return attempts


def next_attempt(attempts: Sequence[Attempt]) -> int:
    return max((attempt.number for attempt in attempts), default=0) + 1


def is_end(result: SpecResult) -> bool:
    """The spec ran to an end that a rerun would only repeat."""
    if not result.is_spec or result.state == "interrupted":
        return False
    return result.outcome in (Outcome.PASSED, Outcome.FAILED, Outcome.SKIPPED)


def latest_ends(shard: Shard, attempts: Iterable[Attempt]) -> dict[str, SpecResult]:
    """Each spec of the shard that has an end, with its latest one."""
    wanted = set(shard.specs)
    ends: dict[str, SpecResult] = {}
    for attempt in attempts:
        for result in attempt.results or ():
            if result.name in wanted and is_end(result):
                ends[result.name] = result
    return ends


def missing(shard: Shard, attempts: Iterable[Attempt]) -> tuple[str, ...]:
    """The shard's specs with no end yet, in the plan's order."""
    ends = latest_ends(shard, attempts)
    return tuple(name for name in shard.specs if name not in ends)


def running_ginkgo(attempt: Attempt, proc_root: Path = Path("/proc")) -> int | None:
    """The PID of the attempt's ginkgo (or e2e_node.test) when the attempt has no recorded end and that process
    still runs it."""
    if attempt.record is not None and attempt.record.exit_code is not None:
        return None
    try:
        pid = int((attempt.report_dir / GINKGO_PID_FILE).read_text().strip())
        cmdline = (proc_root / str(pid) / "cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    program = cmdline.split(b"\0", 1)[0]
    return pid if program.endswith(_PROGRAMS) else None
