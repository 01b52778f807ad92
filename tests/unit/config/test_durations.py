"""Go duration strings, parsed as Go's time.ParseDuration does and printed as time.Duration.String() does."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodeagent.config import DurationError, format_go_duration, parse_go_duration
from nodeagent.config.durations import go_duration_nanoseconds


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", timedelta(0)),
        ("0s", timedelta(0)),
        ("-0", timedelta(0)),
        ("10s", timedelta(seconds=10)),
        ("1m30s", timedelta(seconds=90)),
        ("2h", timedelta(hours=2)),
        ("500ms", timedelta(milliseconds=500)),
        ("1h2m3.5s", timedelta(hours=1, minutes=2, seconds=3.5)),
        ("1.5h", timedelta(minutes=90)),
        (".5s", timedelta(milliseconds=500)),
        ("1.s", timedelta(seconds=1)),
        ("+5s", timedelta(seconds=5)),
        ("-1s", timedelta(seconds=-1)),
        ("-1m30s", timedelta(seconds=-90)),
        ("1h1h", timedelta(hours=2)),  # Go allows a unit twice
        ("250us", timedelta(microseconds=250)),
        ("250\u00b5s", timedelta(microseconds=250)),  # micro sign
        ("250\u03bcs", timedelta(microseconds=250)),  # Greek mu
        ("1500ns", timedelta(microseconds=2)),  # rounded to the microsecond a timedelta holds
        ("100ns", timedelta(0)),
        ("2562047h", timedelta(hours=2562047)),  # just inside Go's int64 nanoseconds
    ],
)
def test_parse_go_duration(text: str, expected: timedelta) -> None:
    assert parse_go_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'invalid duration ""'),
        ("-", 'invalid duration "-"'),
        ("10", 'missing unit in duration "10"'),
        ("1s2", 'missing unit in duration "1s2"'),
        ("1.2.3s", 'missing unit in duration "1.2.3s"'),
        ("abc", 'invalid duration "abc"'),
        ("s", 'invalid duration "s"'),
        (".s", 'invalid duration ".s"'),
        ("1x", 'unknown unit "x" in duration "1x"'),
        ("1sec", 'unknown unit "sec" in duration "1sec"'),
        ("1e3s", 'unknown unit "e" in duration "1e3s"'),
        ("1 s", 'unknown unit " s" in duration "1 s"'),
        (" 1s", 'invalid duration " 1s"'),
        ("--1s", 'invalid duration "--1s"'),
        ("1\u0663s", 'unknown unit "\u0663s"'),  # only ASCII digits are digits
        ("2562048h", "out of range"),
    ],
)
def test_parse_go_duration_rejects(text: str, message: str) -> None:
    with pytest.raises(DurationError, match=message.replace(".", r"\.")):
        parse_go_duration(text)


def test_int64_bounds_are_go_bounds() -> None:
    assert go_duration_nanoseconds("-9223372036854775808ns") == -(1 << 63)
    assert go_duration_nanoseconds("9223372036854775807ns") == (1 << 63) - 1
    with pytest.raises(DurationError):
        go_duration_nanoseconds("9223372036854775808ns")


def test_fractions_truncate_per_piece_like_go() -> None:
    assert go_duration_nanoseconds("1.0000000009s") == 1_000_000_000
    assert go_duration_nanoseconds("0.3333333333333333333h") == 1_199_999_999_999


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (timedelta(0), "0s"),
        (timedelta(seconds=10), "10s"),
        (timedelta(seconds=90), "1m30s"),
        (timedelta(minutes=2), "2m0s"),
        (timedelta(hours=1), "1h0m0s"),
        (timedelta(hours=26), "26h0m0s"),
        (timedelta(seconds=1.5), "1.5s"),
        (timedelta(milliseconds=500), "500ms"),
        (timedelta(microseconds=1500), "1.5ms"),
        (timedelta(microseconds=1), "1\u00b5s"),
        (timedelta(seconds=-1), "-1s"),
        (timedelta(days=2, microseconds=1), "48h0m0.000001s"),
    ],
)
def test_format_go_duration_round_trips(value: timedelta, expected: str) -> None:
    assert format_go_duration(value) == expected
    assert parse_go_duration(expected) == value
