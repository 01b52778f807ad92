"""Eviction thresholds: parsing evictionHard / evictionSoft / evictionSoftGracePeriod / evictionMinimumReclaim into
`Threshold` values, with upstream's rules (pkg/kubelet/eviction/helpers.go ParseThresholdConfig).

Quantities and Go durations are parsed by functions the caller passes in (`parse_quantity`, `parse_duration`): their
parsers live in nodeagent's config, which this package must not import, and no package both may import holds them.
Passing them in keeps one parser for the whole agent, as upstream's eviction takes plain function types. Percentages
are eviction's own notation, so they are parsed here, as upstream parses them in the eviction package: a float32.

Every problem is reported (not only the first, as upstream would), each as `<field>: <signal>: <problem>`, so a bad
value stops start-up with `nodeagent: evictionHard: memory.available: ...`.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from decimal import Decimal

from eviction.quantity import float32, format_binary, format_decimal
from eviction.signals import Signal, parse_signal

# Upstream's hard thresholds on Linux (pkg/kubelet/eviction/defaults_linux.go), used when evictionHard is not set.
DEFAULT_EVICTION_HARD: Mapping[str, str] = {
    "memory.available": "100Mi",
    "nodefs.available": "10%",
    "nodefs.inodesFree": "5%",
    "imagefs.available": "15%",
    "imagefs.inodesFree": "5%",
}

# enforceNodeAllocatable's key that makes upstream watch allocatableMemory.available too.
NODE_ALLOCATABLE_ENFORCEMENT_KEY = "pods"

_PERCENTAGE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_BINARY_SUFFIX = re.compile(r".*[KMGTPE]i")
_EXPONENT_SUFFIX = re.compile(r".*[0-9.][eE][+-]?[0-9]+")


class ThresholdError(ValueError):
    """The eviction settings cannot be used. `problems` lists each as `<field>: <signal>: <problem>`."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class ThresholdValue:
    """Either a quantity (exact, with its printed text) or a fraction of the capacity (upstream's float32)."""

    quantity: Decimal | None = None
    percentage: float = 0.0
    text: str = ""  # the quantity as Go's Quantity.String() prints it

    def __str__(self) -> str:
        if self.quantity is not None:
            return self.text
        return f"{self.percentage * 100:g}%"


@dataclass(frozen=True)
class Threshold:
    signal: Signal
    value: ThresholdValue
    grace_period: timedelta = timedelta(0)
    min_reclaim: ThresholdValue | None = None

    @property
    def hard(self) -> bool:
        """As upstream: a threshold without a grace period acts at once, even one written under evictionSoft."""
        return self.grace_period == timedelta(0)

    def __str__(self) -> str:
        return f"threshold(signal={self.signal}, value={self.value}, gracePeriod={self.grace_period})"


def threshold_quantity(value: ThresholdValue, capacity: int) -> Decimal:
    """The amount a threshold value stands for, given the capacity (upstream's GetThresholdQuantity).

    As upstream: capacity times the float32 percentage in float64, truncated to a whole number.
    """
    if value.quantity is not None:
        return value.quantity
    return Decimal(int(float(capacity) * value.percentage))


def threshold_quantity_text(value: ThresholdValue, capacity: int) -> str:
    """How upstream prints that amount: the quantity as given, or a percentage's result as BinarySI (even inodes)."""
    if value.quantity is not None:
        return value.text
    return format_binary(int(threshold_quantity(value, capacity)))


def _canonical_text(text: str, value: Decimal) -> str:
    """Quantity.String() of a parsed quantity: canonical in the format its suffix chose."""
    binary = _BINARY_SUFFIX.fullmatch(text) is not None
    if value == value.to_integral_value():
        if value.adjusted() > 18:
            # Past int64 ("1e999999" is a valid quantity): the exponent form, without making an int of a million
            # digits (which took minutes, and hung start-up on such an evictionHard).
            sign, digits, exponent = value.as_tuple()  # no context: normalize() could overflow its exponent
            assert isinstance(exponent, int)
            while len(digits) > 1 and digits[-1] == 0:
                digits, exponent = digits[:-1], exponent + 1
            shift = exponent % 3
            return f"{'-' if sign else ''}{''.join(map(str, digits))}{'0' * shift}e{exponent - shift}"
        whole = int(value)
        if _EXPONENT_SUFFIX.fullmatch(text):
            return _exponent_form(whole)
        return format_binary(whole) if binary else format_decimal(whole)
    # A fraction prints in the smallest decimal suffix that makes it whole (Go does this for BinarySI too).
    for scale, suffix in ((3, "m"), (6, "u"), (9, "n")):
        scaled = value.scaleb(scale)
        if scaled == scaled.to_integral_value():
            return f"{int(scaled)}{suffix}"
    return f"{int(value.scaleb(9).to_integral_value(rounding=decimal.ROUND_CEILING))}n"


def _exponent_form(value: int) -> str:
    exponent = 0
    while value != 0 and value % 1000 == 0:
        value //= 1000
        exponent += 3
    return f"{value}e{exponent}" if exponent else str(value)


def parse_percentage(text: str) -> float:
    """ "10%" -> 0.1 as upstream computes it: strconv.ParseFloat(.., 32), then float32 division by 100."""
    number = text.removesuffix("%")
    if _PERCENTAGE.fullmatch(number) is None:
        raise ValueError(f'invalid percentage "{text}": expected a number followed by "%"')
    return float32(float32(float(number)) / 100)


class _Problems:
    def __init__(self) -> None:
        self.found: list[str] = []

    def add(self, field: str, signal: str, problem: str) -> None:
        self.found.append(f"{field}: {signal}: {problem}")


def _signal(problems: _Problems, field: str, name: str) -> Signal | None:
    signal = parse_signal(name)
    if signal is None:
        problems.add(field, name, f"unsupported eviction signal {name}")
    return signal


def _parse_statement(
    problems: _Problems, field: str, signal: Signal, text: str, parse_quantity: Callable[[str], Decimal]
) -> ThresholdValue | None:
    if text.endswith("%"):
        if text in ("0%", "100%"):  # as upstream: these two spellings switch the signal off
            return None
        try:
            percentage = parse_percentage(text)
        except ValueError as e:
            problems.add(field, signal, str(e))
            return None
        if percentage < 0:
            problems.add(field, signal, f"eviction percentage threshold must be >= 0%: {text}")
            return None
        if percentage > 1:
            problems.add(field, signal, f"eviction percentage threshold must be <= 100%: {text}")
            return None
        return ThresholdValue(percentage=percentage)
    try:
        quantity = parse_quantity(text)
    except ValueError as e:
        problems.add(field, signal, str(e))
        return None
    printed = _canonical_text(text, quantity)
    if quantity <= 0:
        problems.add(field, signal, f"eviction threshold must be positive: {printed}")
        return None
    return ThresholdValue(quantity=quantity, text=printed)


def _parse_statements(
    problems: _Problems, field: str, statements: Mapping[str, str], parse_quantity: Callable[[str], Decimal]
) -> list[Threshold]:
    result = []
    for name, text in statements.items():
        signal = _signal(problems, field, name)
        if signal is None:
            continue
        value = _parse_statement(problems, field, signal, text, parse_quantity)
        if value is not None:
            result.append(Threshold(signal=signal, value=value))
    return result


def _parse_grace_periods(
    problems: _Problems, statements: Mapping[str, str], parse_duration: Callable[[str], timedelta]
) -> dict[Signal, timedelta]:
    field = "evictionSoftGracePeriod"
    result: dict[Signal, timedelta] = {}
    for name, text in statements.items():
        signal = _signal(problems, field, name)
        if signal is None:
            continue
        try:
            period = parse_duration(text)
        except ValueError as e:
            problems.add(field, signal, str(e))
            continue
        if period < timedelta(0):
            problems.add(field, signal, f"invalid eviction grace period specified: {text}, must be a positive value")
            continue
        result[signal] = period
    return result


def _parse_minimum_reclaims(
    problems: _Problems, statements: Mapping[str, str], parse_quantity: Callable[[str], Decimal]
) -> dict[Signal, ThresholdValue]:
    field = "evictionMinimumReclaim"
    result: dict[Signal, ThresholdValue] = {}
    for name, text in statements.items():
        signal = _signal(problems, field, name)
        if signal is None:
            continue
        try:
            if text.endswith("%"):
                percentage = parse_percentage(text)
                if percentage <= 0:
                    problems.add(field, signal, f"eviction percentage minimum reclaim must be positive: {text}")
                    continue
                result[signal] = ThresholdValue(percentage=percentage)
                continue
            quantity = parse_quantity(text)
        except ValueError as e:
            problems.add(field, signal, str(e))
            continue
        if quantity < 0:
            problems.add(field, signal, "negative eviction minimum reclaim specified")
            continue
        result[signal] = ThresholdValue(quantity=quantity, text=_canonical_text(text, quantity))
    return result


def parse_thresholds(
    *,
    hard: Mapping[str, str],
    soft: Mapping[str, str] | None = None,
    soft_grace_period: Mapping[str, str] | None = None,
    minimum_reclaim: Mapping[str, str] | None = None,
    enforce_node_allocatable: Iterable[str] = (),
    parse_quantity: Callable[[str], Decimal],
    parse_duration: Callable[[str], timedelta],
) -> tuple[Threshold, ...]:
    """The thresholds in force: hard ones, then soft ones (each with its grace period), each with its minimum reclaim,
    then (when enforceNodeAllocatable has "pods") a copy of the hard memory.available threshold for
    allocatableMemory.available. Raises `ThresholdError` listing every problem."""
    problems = _Problems()
    hard_thresholds = _parse_statements(problems, "evictionHard", hard, parse_quantity)
    soft_thresholds = _parse_statements(problems, "evictionSoft", soft or {}, parse_quantity)
    grace_periods = _parse_grace_periods(problems, soft_grace_period or {}, parse_duration)
    min_reclaims = _parse_minimum_reclaims(problems, minimum_reclaim or {}, parse_quantity)
    with_grace = []
    for threshold in soft_thresholds:
        period = grace_periods.get(threshold.signal)
        if period is None:
            if threshold.signal not in (soft_grace_period or {}):  # a bad period was reported already
                problems.add(
                    "evictionSoftGracePeriod",
                    threshold.signal,
                    f"grace period must be specified for the soft eviction threshold {threshold.signal}",
                )
            continue
        with_grace.append(replace(threshold, grace_period=period))
    if problems.found:
        raise ThresholdError(problems.found)
    result = [replace(t, min_reclaim=min_reclaims.get(t.signal)) for t in [*hard_thresholds, *with_grace]]
    if NODE_ALLOCATABLE_ENFORCEMENT_KEY in tuple(enforce_node_allocatable):
        result = add_allocatable_thresholds(result)
    return tuple(result)


def add_allocatable_thresholds(thresholds: Sequence[Threshold]) -> list[Threshold]:
    """As upstream: each hard memory.available threshold also guards the kubepods cgroup against allocatable."""
    extra = [
        Threshold(signal=Signal.ALLOCATABLE_MEMORY_AVAILABLE, value=t.value, min_reclaim=t.min_reclaim)
        for t in thresholds
        if t.signal == Signal.MEMORY_AVAILABLE and t.hard
    ]
    return [*thresholds, *extra]


_CONTAINERFS_SOURCE = {
    Signal.CONTAINERFS_AVAILABLE: (Signal.NODEFS_AVAILABLE, Signal.IMAGEFS_AVAILABLE),
    Signal.CONTAINERFS_INODES_FREE: (Signal.NODEFS_INODES_FREE, Signal.IMAGEFS_INODES_FREE),
}


def update_containerfs_thresholds(
    thresholds: Sequence[Threshold], *, dedicated_image_fs: bool, split_container_image_fs: bool
) -> tuple[tuple[Threshold, ...], tuple[str, ...]]:
    """containerfs thresholds follow nodefs's or imagefs's, whatever the user wrote (upstream's
    UpdateContainerFsThresholds): nodefs's on one filesystem or when containers live apart from images, imagefs's
    when one image filesystem holds both. Returns the thresholds and a warning per containerfs threshold ignored.

    Upstream also adds an empty threshold (no operator, never met) where the source has none; leaving it out behaves
    the same.
    """
    use_imagefs = dedicated_image_fs and not split_container_image_fs
    warnings = tuple(
        f"found {t.signal} for {'hard' if t.hard else 'soft'} eviction. ignoring"
        for t in thresholds
        if t.signal in _CONTAINERFS_SOURCE
    )
    result = [t for t in thresholds if t.signal not in _CONTAINERFS_SOURCE]
    for target, (nodefs, imagefs) in _CONTAINERFS_SOURCE.items():
        source = imagefs if use_imagefs else nodefs
        for hard in (True, False):
            match = next((t for t in thresholds if t.signal == source and t.hard == hard), None)
            if match is not None:
                result.append(replace(match, signal=target))
    return tuple(result), warnings
