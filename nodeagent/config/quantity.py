"""Kubernetes resource quantities ("100Mi", "1.5Gi", "500m", "1e3") and eviction percentages ("10%").

`parse_quantity` follows apimachinery's `resource.ParseQuantity`: an optional sign, a decimal number ("1", "1.5",
"1.", ".5"), then at most one suffix:

- binary SI: Ki Mi Gi Ti Pi Ei (powers of 1024),
- decimal SI: n u m "" k M G T P E (powers of 1000; upstream accepts n and u too, though its docs list only m),
- a decimal exponent: e or E followed by a signed integer ("1e3", "2E-3"). A lone "E" is exa, as upstream.

The value is returned as an exact `Decimal`: admission and eviction compare quantities, and a float would make
"0.1" + "0.2" differ from "0.3". Upstream rounds some values when it stores them (to whole nano units); callers that
need a whole number of bytes or millicores round the exact value themselves.

A percentage is not a quantity: it is allowed only in eviction thresholds and minimum reclaims, so it has its own
parser. This module imports nothing from the rest of the project, so it can move to a shared package when another one
(eviction, admission) needs it.
"""

from __future__ import annotations

import decimal
import math
import re
from decimal import Decimal

from nodeagent.config.errors import QuantityError

_NUMBER = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_QUANTITY = re.compile(rf"(?P<number>{_NUMBER})(?P<suffix>.*)", re.DOTALL)
_EXPONENT = re.compile(r"[eE](?P<exponent>[+-]?[0-9]+)")
_PERCENTAGE = re.compile(rf"(?P<number>{_NUMBER}(?:[eE][+-]?[0-9]+)?)%")

_BINARY_SUFFIXES: dict[str, int] = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}  # powers of 1024
_DECIMAL_SUFFIXES: dict[str, int] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}  # powers of 10

_FORMAT_HINT = "expected a number with an optional suffix (Ki Mi Gi Ti Pi Ei, n u m k M G T P E, or e<exponent>)"


def _exact_context(number: str) -> decimal.Context:
    # Enough digits that multiplying by up to 1024**6 (19 digits) never rounds; any rounding left is a bug, so trap it.
    ctx = decimal.Context(prec=len(number) + 40, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
    ctx.traps[decimal.Inexact] = True
    ctx.traps[decimal.Overflow] = True
    return ctx


def parse_quantity(text: str) -> Decimal:
    """Parse a resource quantity into its exact value: "1Ki" is 1024, "1k" is 1000, "500m" is 0.5, "1e3" is 1000."""
    if not isinstance(text, str):
        raise QuantityError(f"invalid quantity {text!r}: not a string")
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(f'invalid quantity "{text}": {_FORMAT_HINT}')
    number, suffix = match["number"], match["suffix"]
    exponent = _EXPONENT.fullmatch(suffix)
    if suffix not in _BINARY_SUFFIXES and suffix not in _DECIMAL_SUFFIXES and exponent is None:
        raise QuantityError(f'invalid quantity "{text}": unknown suffix "{suffix}"; {_FORMAT_HINT}')
    value = Decimal(number)
    ctx = _exact_context(number)
    try:
        if suffix in _BINARY_SUFFIXES:
            value = ctx.multiply(value, Decimal(1024) ** _BINARY_SUFFIXES[suffix])
        elif suffix in _DECIMAL_SUFFIXES:
            value = ctx.scaleb(value, _DECIMAL_SUFFIXES[suffix])
        elif exponent is not None:
            value = ctx.scaleb(value, int(exponent["exponent"]))
        # One spelling per value, so logs and equality read naturally: 1024 rather than 1.024E+3, 0.5 not 0.500.
        if value.is_zero():
            return Decimal(0)
        if value == value.to_integral_value() and value.adjusted() < ctx.prec:
            return ctx.quantize(value, Decimal(1))
        return ctx.normalize(value)
    except decimal.DecimalException as e:
        raise QuantityError(f'invalid quantity "{text}": out of range') from e


INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)


def ceil_int64(value: Decimal, *, milli: bool = False) -> int:
    """ceil(value), or ceil(value * 1000) with `milli`, saturated to a Go int64 (Quantity.Value / MilliValue hold an
    int64). The apiserver stores any quantity of the grammar, "1e999999" included: exact, it would overflow every
    CRI field and take seconds to turn into an int."""
    scaled = value.scaleb(3) if milli and INT64_MIN <= value <= INT64_MAX else value
    if scaled > INT64_MAX:
        return INT64_MAX
    if scaled < INT64_MIN:
        return INT64_MIN
    return math.ceil(scaled)


def parse_percentage(text: str) -> Decimal:
    """Parse "10%" into the fraction 0.10, as the eviction manager reads percentage thresholds."""
    if not isinstance(text, str):
        raise QuantityError(f"invalid percentage {text!r}: not a string")
    match = _PERCENTAGE.fullmatch(text)
    if match is None:
        raise QuantityError(f'invalid percentage "{text}": expected a number followed by "%"')
    return Decimal(match["number"]).scaleb(-2)


def is_percentage(text: str) -> bool:
    """Whether a threshold value is written as a percentage; it is then parsed with `parse_percentage`."""
    return text.endswith("%")
