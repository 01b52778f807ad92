"""Run the suite: the ginkgo command line, and its output followed as it comes.

ginkgo runs e2e.test (in `--procs` processes, which the suite allows: a spec that may not run beside others carries
[Serial] and is skipped here) with the e2e framework's flags after `--`. Its whole output goes to `ginkgo.log` in
the report directory; the terminal gets one line per finished spec, read from ginkgo's verbose report
(`ProgressParser`), and ginkgo's own totals at the end. The JUnit report the framework writes (`--report-dir`) is
the record; the lines here only show where the run is.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nodeagent.conformance.build import Suite

DEFAULT_FOCUS = r"\[NodeConformance\]"
# As the issue and upstream's node conformance jobs: specs that need the node to themselves, break it, are known
# to flake, or need an optional feature are left out; [Slow] ones unless asked for.
ALWAYS_SKIP = (r"\[Serial\]", r"\[Disruptive\]", r"\[Flaky\]", r"\[Feature:[^\]]+\]")
SLOW_SKIP = r"\[Slow\]"
DEFAULT_TIMEOUT = "3h"
# Two processes: the 164 default specs took 26.5 min so on a 2-core machine; most of a spec's time is waiting.
DEFAULT_PROCS = 2


def default_skip(*, slow: bool) -> str:
    return "|".join(ALWAYS_SKIP if slow else (*ALWAYS_SKIP, SLOW_SKIP))


@dataclass(frozen=True)
class RunOptions:
    kubeconfig: Path
    report_dir: Path
    focus: str = DEFAULT_FOCUS
    skip: str = field(default_factory=lambda: default_skip(slow=False))
    procs: int = DEFAULT_PROCS
    provider: str = "skeleton"
    timeout: str = DEFAULT_TIMEOUT
    repo_list: Path | None = None
    kubectl: Path | None = None
    kubelet_root_dir: Path | None = None
    label_filter: str = ""  # ginkgo v2's --label-filter; empty: none


def ginkgo_argv(suite: Suite, options: RunOptions) -> list[str]:
    """`ginkgo [ginkgo flags] e2e.test -- [framework flags]`."""
    argv = [
        str(suite.ginkgo),
        f"--procs={options.procs}",
        f"--focus={options.focus}",
        # An empty skip means none: ginkgo would compile `--skip=` to a regex that matches, and so skips, every spec.
        *([f"--skip={options.skip}"] if options.skip else []),
        f"--timeout={options.timeout}",
        *([f"--label-filter={options.label_filter}"] if options.label_filter else []),
        # Verbose: every finished spec is reported with its name (what ProgressParser follows); without colour,
        # as the output goes to a file; skipped specs (thousands, left out by focus) are not listed one by one.
        "-v",
        "--no-color",
        "--silence-skips",
        str(suite.e2e_test),
        "--",
        f"--kubeconfig={options.kubeconfig}",
        f"--provider={options.provider}",
        f"--report-dir={options.report_dir}",
        # Test data the specs leave (the default is /tmp) goes beside the report.
        f"--e2e-output-dir={options.report_dir}",
        # Gathering logs from master and nodes after the suite needs SSH to cloud machines: not here.
        "--disable-log-dump",
    ]
    if options.repo_list is not None:
        argv.append(f"--kube-test-repo-list={options.repo_list}")
    if options.kubectl is not None:
        argv.append(f"--kubectl-path={options.kubectl}")
    if options.kubelet_root_dir is not None:
        argv.append(f"--kubelet-root-dir={options.kubelet_root_dir}")
    return argv


_DELIMITER = "------------------------------"
_HEADER = re.compile(
    r"^(?P<mark>[•SP+])(?: \[(?P<state>FAILED|TIMEDOUT|PANICKED|INTERRUPTED|ABORTED|SKIPPED|PENDING)\])?"
    r"(?: \[(?P<seconds>[\d.]+) seconds\])?$"
)
_SUITE_NODE_FAILED = re.compile(r"^\[[A-Za-z]+Suite\] \[[A-Z]+\]")
_WILL_RUN = re.compile(r"^Will run (?P<selected>\d+) of (?P<total>\d+) specs")
_TOTALS = re.compile(r"^(Ran \d+ of \d+ Specs|SUCCESS!|FAIL!|Ginkgo ran|Test Suite (Passed|Failed))")
# ginkgo appends the spec's labels to its text (`... [Conformance] [sig-node, NodeConformance, Conformance]`); the
# text already carries them in brackets.
_LABELS = re.compile(r" \[[^\[\]]*, [^\[\]]*\]$")
# For a failure ginkgo marks the failing node in the text (`Pods [It] should ...`, `Probing [BeforeEach] should`).
_NODE_MARK = re.compile(
    r"\[(It|BeforeEach|AfterEach|JustBeforeEach|JustAfterEach|BeforeAll|AfterAll|DeferCleanup[^\]]*)\] "
)


@dataclass(frozen=True)
class SpecFinished:
    state: str  # "passed", or ginkgo's label lower-cased: failed, timedout, skipped, ...
    seconds: float | None
    name: str


def spec_text(line: str) -> str:
    return _NODE_MARK.sub("", _LABELS.sub("", line.strip()))


@dataclass
class ProgressParser:
    """Turns ginkgo's verbose output, line by line, into the lines worth showing: one per finished spec.

    ginkgo reports a spec in one of two shapes. Run in one process it streams: a delimiter, the spec's text, its log,
    then the header (`• [2.053 seconds]`), and for a failure the text once more. Run in several it reports each spec
    whole when it ends: a delimiter, the header, the text, the log. So the text is the line after a delimiter, or,
    when a header comes right after the delimiter, the line after the header.
    """

    selected: int | None = None
    finished: int = 0
    failed: int = 0
    _after_delimiter: bool = False
    _current: str | None = None
    _pending: tuple[str, float | None] | None = None

    def feed(self, line: str) -> str | None:
        """The progress line to show for this output line, if any."""
        stripped = line.strip()
        # ginkgo's own structure starts at column 0; a spec's log, its progress reports (with delimiters of their
        # own) and its failure details are indented.
        if not stripped or line[:1].isspace():
            return None
        if self._pending is not None:
            state, seconds = self._pending
            self._pending = None
            name = self._current or (spec_text(stripped) if stripped != _DELIMITER else "(unnamed spec)")
            self._current = None
            shown = self._finish(SpecFinished(state, seconds, name))
            self._after_delimiter = stripped == _DELIMITER
            return shown
        if stripped == _DELIMITER:
            self._after_delimiter = True
            self._current = None
            return None
        if (match := _HEADER.match(stripped)) is not None:
            state = (match.group("state") or "passed").lower()
            seconds = float(match.group("seconds")) if match.group("seconds") else None
            self._pending = (state, seconds)
            self._after_delimiter = False
            return None
        if _TOTALS.match(stripped) or _SUITE_NODE_FAILED.match(stripped):
            self._after_delimiter = False
            return stripped
        if self._after_delimiter:
            self._after_delimiter = False
            self._current = spec_text(stripped)
            return None
        if (match := _WILL_RUN.match(stripped)) is not None:
            self.selected = int(match.group("selected"))
            return stripped
        return None

    def _finish(self, spec: SpecFinished) -> str:
        self.finished += 1
        if spec.state not in ("passed", "skipped", "pending"):
            self.failed += 1
        of = f"/{self.selected}" if self.selected is not None else ""
        took = f" ({spec.seconds:.1f}s)" if spec.seconds is not None else ""
        return f"[{self.finished}{of}, {self.failed} failed] {spec.state.upper()} {spec.name}{took}"


async def run_ginkgo(
    argv: list[str],
    *,
    env: dict[str, str],
    log_path: Path,
    show: Callable[[str], None],
    stop: asyncio.Event | None = None,
    on_start: Callable[[int], None] | None = None,
    cwd: Path | None = None,
) -> int:
    """Run ginkgo to its end, its output into `log_path` and the progress lines into `show`; ginkgo's exit code.

    When `stop` is set (the user's Ctrl-C or a SIGTERM), ginkgo gets one SIGINT: it interrupts the running specs,
    runs their cleanup and still writes the report, which is then read as usual. `on_start` gets ginkgo's PID, which
    is also its process group's (it runs in a session of its own). `cwd`: its working directory (the node suite
    writes its kubelet config there).
    """
    parser = ProgressParser()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        limit=1 << 20,  # a spec's captured output can hold long lines
        # Its own process group: a Ctrl-C at the terminal reaches only us, and ginkgo's group gets exactly one SIGINT.
        start_new_session=True,
    )
    assert proc.stdout is not None
    if on_start is not None:
        on_start(proc.pid)

    async def interrupt() -> None:
        if stop is None:
            return
        await stop.wait()
        if proc.returncode is None:
            show("interrupting ginkgo (SIGINT): it cleans up and writes the report")
            # To its whole process group, as a Ctrl-C at a terminal: run in one process, the ginkgo CLI only waits
            # for e2e.test, which must get the signal itself.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)

    watcher = asyncio.create_task(interrupt(), name="conformance-interrupt")
    try:
        with log_path.open("wb") as log:
            while True:
                try:
                    raw = await proc.stdout.readline()
                except ValueError:  # a line beyond the limit: keep what was read, go on
                    raw = await proc.stdout.read(1 << 20)
                if not raw:
                    break
                log.write(raw)
                log.flush()
                line = parser.feed(raw.decode(errors="replace"))
                if line is not None:
                    show(line)
        return await proc.wait()
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
