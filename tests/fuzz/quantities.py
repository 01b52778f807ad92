"""Quantities and durations: `nodeagent.config.quantity` (parse_quantity, parse_percentage), `nodeagent.config
.durations` (Go durations, both ways), `eviction.quantity` (canonical printing of whole amounts) and
`eviction.thresholds.parse_percentage`. Documented errors: `QuantityError`, `DurationError` (both ValueError
subclasses of the config boundary). A printed duration must parse back to the same value."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from eviction.quantity import Quantity, format_binary, format_decimal
from eviction.thresholds import parse_percentage as threshold_percentage
from nodeagent.config.durations import format_go_duration, go_duration_nanoseconds, parse_go_duration
from nodeagent.config.errors import DurationError, QuantityError
from nodeagent.config.quantity import is_percentage, parse_percentage, parse_quantity
from tests.fuzz.engine import Target
from tests.fuzz.strategies import odd_ints, strings

_grammar = st.builds(
    lambda sign, number, suffix: f"{sign}{number}{suffix}",
    st.sampled_from(["", "+", "-"]),
    st.one_of(
        st.integers(0, 10**40).map(str),
        st.decimals(allow_nan=False, allow_infinity=False).map(str),
        st.from_regex(r"[0-9]{0,5}\.[0-9]{0,25}", fullmatch=True),
    ),
    st.one_of(
        st.sampled_from(["", "%", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"]),
        st.builds(lambda e, n: f"{e}{n}", st.sampled_from(["e", "E", "e+", "e-", "E-"]), st.integers(0, 10**7)),
        st.sampled_from(["ns", "us", "µs", "μs", "ms", "s", "m", "h", "h30m", "m1.5s", "d", "x"]),
    ),
)
_long = st.builds(
    lambda digits, suffix: digits + suffix,
    st.text(alphabet="0123456789", min_size=4000, max_size=6000),
    st.sampled_from(["", "s", "h", "Mi", "%", "e3", ".5s"]),
)
_long = st.builds(
    lambda digits, suffix: digits + suffix,
    st.text(alphabet="0123456789", min_size=4000, max_size=6000),
    st.sampled_from(["", "s", "h", "Mi", "%", "e3", ".5s"]),
)
strategy = st.one_of(
    st.tuples(st.one_of(_grammar, strings), odd_ints), st.tuples(_grammar, st.just(0)), st.tuples(_long, st.just(0))
)


def _try(parse: Any, text: str) -> Any:
    try:
        return parse(text)
    except (QuantityError, DurationError):
        return None


def run(case: tuple[str, int]) -> None:
    text, number = case
    _try(parse_quantity, text)
    _try(parse_percentage, text)
    if is_percentage(text):
        try:
            threshold_percentage(text)
        except ValueError as exc:  # eviction.thresholds documents ValueError for a percentage it cannot read
            if type(exc) is not ValueError and not isinstance(exc, QuantityError):
                raise
    nanoseconds = _try(go_duration_nanoseconds, text)
    duration = _try(parse_go_duration, text)
    if duration is not None:
        printed = format_go_duration(duration)
        if parse_go_duration(printed) != duration:
            raise AssertionError(f"{text!r} printed as {printed!r}, which parses to another duration")
    elif nanoseconds is not None and abs(nanoseconds) < 2**62:
        raise AssertionError(f"{text!r}: nanoseconds {nanoseconds} but no timedelta")
    if number >= 0:
        Quantity.of_bytes(number)
        Quantity.of_count(number)
        format_binary(number)
        format_decimal(number)


TARGET = Target("quantities", strategy, run, (QuantityError, DurationError), __doc__ or "")
