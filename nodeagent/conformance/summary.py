"""What a run says: passed / failed / skipped, and the failed specs grouped by cause.

A cause is the failure message's first telling line with what differs from spec to spec taken out: UIDs, generated
name suffixes, hex addresses and numbers (namespaces such as `pods-8713`, durations, IPs, ports). Gomega's generic
openings ("Timed out after 300.001s.", "Unexpected error:", "Expected") tell nothing alone, so the next telling line
is added to them. Many specs fail only by waiting in vain for a pod; when the kubelet recorded a warning event in the
spec's namespace (the framework dumps them into the timeline on failure), the first one is then the cause, as it
says why, with the specs' own messages shown under it. Specs
that fail for one reason in nodeagent then fall into one group, largest first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nodeagent.conformance.junit import Outcome, SpecResult

MAX_CAUSE = 200
_STATE_LABEL = re.compile(r"^\[(FAILED|TIMEDOUT|PANICKED|INTERRUPTED|ABORTED)\]\s*")
_LOCATION = re.compile(r"^In \[[^\]]+\] at: ")
_GENERIC = re.compile(
    r"^(Timed out after [\d.]+s\.|Unexpected error:|Expected|to be|to equal|The function passed to \w+ .*"
    r"|A (spec|suite) timeout occurred|.*:)$"
)
# `<*errors.errorString | 0xc000123>: pod not running` (gomega's object dump): what follows the type is the message.
_TYPE_DUMP = re.compile(r"^<[^>]*>:?\s*")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_HEX = re.compile(r"\b0x[0-9a-f]+\b")
_LONG_HEX = re.compile(r"\b[0-9a-f]{12,}\b")
# apimachinery's generateName suffix: five of "bcdfghjklmnpqrstvwxz2456789" (no vowels, so no English word).
_GENERATED_SUFFIX = re.compile(r"-[bcdfghjklmnpqrstvwxz2456789]{5}\b")
_NUMBER = re.compile(r"(?<![A-Za-z0-9])\d+")  # not inside a word: sha256, e2e, ipv4 stay
_SPACES = re.compile(r"\s+")


def _scrub(line: str) -> str:
    line = _UUID.sub("<uid>", line)
    line = _HEX.sub("0x<hex>", line)
    line = _LONG_HEX.sub("<hex>", line)
    line = _GENERATED_SUFFIX.sub("-<rand>", line)
    line = _NUMBER.sub("N", line)
    return _SPACES.sub(" ", line).strip()


def normalise_cause(message: str) -> str:
    """The failure message's telling line(s), scrubbed of names, UIDs and numbers, at most MAX_CAUSE characters."""
    parts: list[str] = []
    for raw in message.splitlines():
        line = raw.strip()
        if not parts:
            line = _STATE_LABEL.sub("", line)
        if _LOCATION.match(line):
            break
        line = _TYPE_DUMP.sub("", line) if line.startswith("<") else line
        if not line or line in ("{", "}", "occurred"):
            continue
        parts.append(line)
        if not _GENERIC.match(line):
            break
    cause = _scrub(" ".join(parts)) or "(no failure message)"
    return cause if len(cause) <= MAX_CAUSE else cause[: MAX_CAUSE - 3] + "..."


# The events the framework dumps on failure: `... - event for <object>: {kubelet <node>} <Reason>: <message>`.
_KUBELET_EVENT = re.compile(r" - event for [^:]+: \{kubelet [^}]*\} (?P<reason>\w+): (?P<message>.*)$")
# The kubelet's warning reasons that say why a pod did not get where a spec waited for it to go.
_KUBELET_WARNINGS = frozenset(
    {
        "Failed",
        "FailedMount",
        "FailedCreatePodSandBox",
        "FailedCreatePodContainer",
        "FailedKillPod",
        "FailedSync",
        "FailedPostStartHook",
        "FailedPreStopHook",
        "FailedValidation",
        "InspectFailed",
        "ErrImageNeverPull",
        "OutOfcpu",
        "OutOfmemory",
        "NodeAffinity",
        "UnexpectedAdmissionError",
    }
)


def kubelet_hint(timeline: str) -> str | None:
    """The first warning the kubelet (nodeagent) recorded in the failed spec's namespace, scrubbed: many specs only
    say they timed out waiting for a pod, and this says why the pod did not get there."""
    for line in timeline.splitlines():
        match = _KUBELET_EVENT.search(line)
        if match is not None and match.group("reason") in _KUBELET_WARNINGS:
            hint = _scrub(f"{match.group('reason')}: {match.group('message')}")
            return hint if len(hint) <= MAX_CAUSE else hint[: MAX_CAUSE - 3] + "..."
    return None


# A failure that only says the spec waited in vain for a pod: the kubelet's warning, if any, says why.
_WAITED = re.compile(
    r"Timed out|timed out|wait(ing)? for pod|to succeed|to be (running|ready|Succeeded|Failed|deleted)|"
    r"A spec timeout occurred|expected pod \S+ success"
)


def cause_of(result: SpecResult) -> tuple[str, str | None]:
    """The group key of a failure and a note to show under it.

    When the spec only waited in vain for a pod and the kubelet recorded a warning in its namespace, the warning is
    the cause (every spec of a missing image falls into one group, whatever pod it waited for) and the spec's own
    message the note; otherwise the spec's normalised message is the cause and the warning, if any, the note."""
    message = normalise_cause(result.message)
    hint = kubelet_hint(result.timeline)
    if hint is None:
        return message, None
    if _WAITED.search(message):
        return f"kubelet: {hint}", f"the spec: {message}"
    return message, f"kubelet: {hint}"


@dataclass(frozen=True)
class Counts:
    passed: int
    failed: int
    skipped: int  # skipped themselves at run time (e2eskipper), with a reason
    not_selected: int  # left out by focus/skip
    setup_failed: int  # suite nodes (BeforeSuite, AfterSuite, report nodes) that failed

    @property
    def ran(self) -> int:
        return self.passed + self.failed


def count(results: Iterable[SpecResult]) -> Counts:
    passed = failed = skipped = not_selected = setup_failed = 0
    for result in results:
        if not result.is_spec:
            setup_failed += result.outcome is Outcome.FAILED
            continue
        if result.outcome is Outcome.PASSED:
            passed += 1
        elif result.outcome is Outcome.FAILED:
            failed += 1
        elif result.outcome is Outcome.SKIPPED:
            skipped += 1
        else:
            not_selected += 1
    return Counts(passed, failed, skipped, not_selected, setup_failed)


@dataclass(frozen=True)
class FailureGroup:
    cause: str
    specs: tuple[str, ...]
    notes: tuple[str, ...]  # the specs' own messages under a kubelet warning, or the kubelet's warnings


def group_failures(results: Iterable[SpecResult]) -> list[FailureGroup]:
    """Failed specs and suite nodes by cause; largest group first, then by cause; specs and notes sorted."""
    specs: dict[str, list[str]] = {}
    notes: dict[str, set[str]] = {}
    for result in results:
        if result.outcome is Outcome.FAILED:
            name = result.name if result.is_spec else f"[{result.node_type}] {result.name}".strip()
            cause, note = cause_of(result)
            specs.setdefault(cause, []).append(name)
            if note is not None:
                notes.setdefault(cause, set()).add(note)
    ordered = sorted(specs.items(), key=lambda item: (-len(item[1]), item[0]))
    return [FailureGroup(cause, tuple(sorted(names)), tuple(sorted(notes.get(cause, ())))) for cause, names in ordered]


def skip_reasons(results: Iterable[SpecResult]) -> list[tuple[str, int]]:
    """Why specs skipped themselves, scrubbed as causes are, most frequent first."""
    reasons: dict[str, int] = {}
    for result in results:
        if result.is_spec and result.outcome is Outcome.SKIPPED:
            reason = normalise_cause(result.message.removeprefix("skipped - "))
            reasons[reason] = reasons.get(reason, 0) + 1
    return sorted(reasons.items(), key=lambda item: (-item[1], item[0]))


def format_summary(results: Sequence[SpecResult]) -> str:
    counts = count(results)
    lines = [
        f"passed {counts.passed}, failed {counts.failed}, skipped {counts.skipped} "
        f"(of {counts.ran + counts.skipped} selected specs; {counts.not_selected} not selected)"
    ]
    if counts.setup_failed:
        lines.append(f"suite nodes failed: {counts.setup_failed}")
    groups = group_failures(results)
    if groups:
        lines.append("")
        lines.append("failed, by cause:")
        for group in groups:
            lines.append(f"  {len(group.specs)} x {group.cause}")
            lines.extend(f"      ({note})" for note in group.notes)
            lines.extend(f"      - {spec}" for spec in group.specs)
    reasons = skip_reasons(results)
    if reasons:
        lines.append("")
        lines.append("skipped, by reason:")
        lines.extend(f"  {n} x {reason}" for reason, n in reasons)
    return "\n".join(lines)
