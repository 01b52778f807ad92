"""The specs a selection holds, from a ginkgo dry run, and a focus that selects exactly a list of them.

`ginkgo --dry-run --focus=... --json-report=F e2e.test` walks the suite without running a spec (2 s for e2e.test
v1.34.4, no cluster needed) and reports every spec: those the selection keeps with state `passed`, the rest
`skipped`. A spec's full text is its containers' texts and its own, joined by spaces; its labels are the
containers' labels and its own (the e2e framework turns bracketed tags into labels: `[Serial]` → `Serial`).

ginkgo matches --focus against the suite's description, a space, then the spec's full text ("Kubernetes e2e suite
[sig-node] Pods ..."), so `^<description> (?:<text>|<text>...)$` selects exactly the listed specs and no spec whose
text merely contains one of theirs.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeagent.conformance.build import Suite
from nodeagent.conformance.errors import ConformanceError
from nodeagent.conformance.subset import escape

CERTIFIED_FOCUS = r"\[Conformance\]"
# The suite's own flags after `--`: e2e.test needs a provider; e2e_node.test has no such flag and refuses it.
E2E_SUITE_ARGS: tuple[str, ...] = ("--provider=skeleton",)
# The kernel caps one argument at 128 KiB (MAX_ARG_STRLEN); a shard's focus stays well below it.
MAX_FOCUS = 100_000


@dataclass(frozen=True)
class ListedSpec:
    name: str  # the full text, as the JUnit report names it after `[It] `
    labels: tuple[str, ...]

    @property
    def serial(self) -> bool:
        """Must run alone: ginkgo runs [Serial] specs after the parallel ones, on process 1 only."""
        return "Serial" in self.labels or "[Serial]" in self.name

    @property
    def slow(self) -> bool:
        return "Slow" in self.labels or "[Slow]" in self.name


@dataclass(frozen=True)
class SpecList:
    description: str  # the suite's description, which ginkgo's focus sees before the spec's text
    specs: tuple[ListedSpec, ...]  # sorted by name


def _labels(report: dict[str, Any]) -> tuple[str, ...]:
    labels: list[str] = []
    for group in report.get("ContainerHierarchyLabels") or []:
        labels.extend(group or [])
    labels.extend(report.get("LeafNodeLabels") or [])
    return tuple(dict.fromkeys(labels))


def parse_dry_run(text: str) -> SpecList:
    """The selected specs of a ginkgo JSON report written by a dry run."""
    try:
        reports = json.loads(text)
        suite = reports[0]
        description = str(suite["SuiteDescription"])
        entries = suite.get("SpecReports") or []
    except (ValueError, LookupError, TypeError) as exc:
        raise ConformanceError(f"the dry run's JSON report cannot be read: {exc}") from exc
    specs: dict[str, ListedSpec] = {}
    for entry in entries:
        if entry.get("LeafNodeType") != "It" or entry.get("State") != "passed":
            continue
        name = " ".join([*(entry.get("ContainerHierarchyTexts") or []), entry.get("LeafNodeText", "")]).strip()
        specs[name] = ListedSpec(name, _labels(entry))
    return SpecList(description, tuple(specs[name] for name in sorted(specs)))


def _spaced(pattern: str) -> str:
    """A run of spaces in a spec's name matches one or more: the name joins every container's text (an empty one
    makes two spaces, as e2e_node's `Context("")` in eviction_test.go does), while ginkgo's focus sees the texts
    that are not empty, joined by one space (ginkgo v2 `Spec.Text`)."""
    return re.sub(" {2,}", " +", pattern)


def exact_focus(description: str, names: Iterable[str]) -> str:
    """A ginkgo --focus (RE2) that selects exactly the specs with these full texts."""
    focus = f"^{escape(description)} (?:{'|'.join(_spaced(escape(name)) for name in names)})$"
    if len(focus) > MAX_FOCUS:
        raise ConformanceError(f"a focus of {len(focus)} characters is too long for one argument: use smaller shards")
    return focus


def dry_run_argv(
    suite: Suite, *, focus: str, label_filter: str, report: Path, suite_args: Sequence[str] = E2E_SUITE_ARGS
) -> list[str]:
    return [
        str(suite.ginkgo),
        "--dry-run",
        f"--focus={focus}",
        *([f"--label-filter={label_filter}"] if label_filter else []),
        "--no-color",
        "--silence-skips",
        f"--json-report={report}",
        str(suite.e2e_test),
        "--",
        *suite_args,
    ]


async def list_specs(
    suite: Suite, *, focus: str, label_filter: str, work_dir: Path, suite_args: Sequence[str] = E2E_SUITE_ARGS
) -> SpecList:
    """The specs that `focus` and `label_filter` select, by a dry run of the suite (no cluster involved)."""
    report = work_dir / "dry-run.json"
    await asyncio.to_thread(work_dir.mkdir, parents=True, exist_ok=True)
    argv = dry_run_argv(suite, focus=focus, label_filter=label_filter, report=report, suite_args=suite_args)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=work_dir,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await proc.communicate()
    return await asyncio.to_thread(_read_dry_run, report, proc.returncode, output)


def _read_dry_run(report: Path, code: int | None, output: bytes) -> SpecList:
    try:
        if code != 0 or not report.exists():
            tail = "\n".join(output.decode(errors="replace").splitlines()[-15:])
            raise ConformanceError(f"ginkgo --dry-run exited {code}:\n{tail}")
        return parse_dry_run(report.read_text())
    finally:
        report.unlink(missing_ok=True)  # 10 MB for the whole suite; what matters goes into the plan


def narrow(specs: SpecList, pattern: str | None) -> SpecList:
    """Only the specs whose text `pattern` (a Python regex, searched as ginkgo searches) matches."""
    if not pattern:
        return specs
    regex = re.compile(pattern)
    return SpecList(specs.description, tuple(s for s in specs.specs if regex.search(s.name)))
