"""Go duration strings (`metav1.Duration` in KubeletConfiguration) to and from `datetime.timedelta`.

The grammar is Go's `time.ParseDuration`: an optional sign, then one or more `<decimal number><unit>` pieces, with
units ns, us (also µs and μs), ms, s, m, h; a bare "0" is the only number allowed without a unit. Go counts
nanoseconds and truncates fractional nanoseconds per piece, as done here; a `timedelta` then holds microseconds, so
the result is rounded to the nearest microsecond (half to even). Values beyond Go's int64 nanoseconds (about 292
years) are refused as Go refuses them.

This module imports nothing from the rest of the project, so it can move to a shared package when another one needs it.
"""

from __future__ import annotations

from datetime import timedelta
from fractions import Fraction

from nodeagent.config.errors import DurationError

_NS_PER_UNIT: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign, what Go itself prints
    "\u03bcs": 1_000,  # Greek small letter mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_MAX_NS = (1 << 63) - 1
# Digits read of a number: a whole part longer than this is out of range anyway; fraction digits past it cannot
# change whole nanoseconds (Go stops reading them sooner, once they would overflow an int64).
_MAX_DIGITS = 40


def _is_digit(c: str) -> bool:
    # str.isdigit() also accepts other scripts' digits and superscripts; Go accepts ASCII only.
    return "0" <= c <= "9"


def go_duration_nanoseconds(text: str) -> int:
    """Parse a Go duration string into whole nanoseconds, exactly as Go does."""
    if not isinstance(text, str):
        raise DurationError(f"invalid duration {text!r}: not a string")
    s = text
    negative = False
    if s[:1] in ("-", "+"):
        negative = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise DurationError(f'invalid duration "{text}"')
    total = 0
    i, n = 0, len(s)
    while i < n:
        start = i
        while i < n and _is_digit(s[i]):
            i += 1
        whole = s[start:i]
        fraction = ""
        if i < n and s[i] == ".":
            i += 1
            frac_start = i
            while i < n and _is_digit(s[i]):
                i += 1
            fraction = s[frac_start:i]
        if not whole and not fraction:
            raise DurationError(f'invalid duration "{text}"')
        unit_start = i
        while i < n and s[i] != "." and not _is_digit(s[i]):
            i += 1
        unit = s[unit_start:i]
        if not unit:
            raise DurationError(f'missing unit in duration "{text}"')
        scale = _NS_PER_UNIT.get(unit)
        if scale is None:
            raise DurationError(f'unknown unit "{unit}" in duration "{text}"')
        # Past any duration, and past what int() converts (sys.get_int_max_str_digits).
        if len(whole.lstrip("0")) > _MAX_DIGITS:
            raise DurationError(f'invalid duration "{text}": out of range')
        value = Fraction(int(whole or "0"))
        if fraction:
            # Digits past nanoseconds cannot change the truncated result; Go reads at most that many too.
            fraction = fraction[:_MAX_DIGITS]
            value += Fraction(int(fraction), 10 ** len(fraction))
        total += int(value * scale)  # int() truncates, like Go's per-piece arithmetic
        if total > _MAX_NS + (1 if negative else 0):
            raise DurationError(f'invalid duration "{text}": out of range')
    return -total if negative else total


def parse_go_duration(text: str) -> timedelta:
    """Parse a Go duration string ("10s", "1m30s", "1h2m3.5s", "500ms", "-1s") into a `timedelta`."""
    ns = go_duration_nanoseconds(text)
    return timedelta(microseconds=round(Fraction(ns, 1000)))


def _with_fraction(value: int, scale: int) -> str:
    whole, rest = divmod(value, scale)
    if not rest:
        return str(whole)
    digits = str(rest).rjust(len(str(scale)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}"


def format_go_duration(value: timedelta) -> str:
    """Format like Go's `time.Duration.String()`: "0s", "500ms", "1.5s", "2m0s", "1h0m0s"."""
    ns = ((value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds) * 1000
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < 1_000:
        return f"{sign}{ns}ns"
    if ns < 1_000_000:
        return f"{sign}{_with_fraction(ns, 1_000)}\u00b5s"
    if ns < 1_000_000_000:
        return f"{sign}{_with_fraction(ns, 1_000_000)}ms"
    hours, ns = divmod(ns, _NS_PER_UNIT["h"])
    minutes, ns = divmod(ns, _NS_PER_UNIT["m"])
    seconds = _with_fraction(ns, _NS_PER_UNIT["s"])
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}s"
    if minutes:
        return f"{sign}{minutes}m{seconds}s"
    return f"{sign}{seconds}s"
