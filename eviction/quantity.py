"""Quantities as eviction prints them: resource.Quantity's canonical form, and upstream's float32 percentages.

The eviction message quotes quantities the way Go prints them ("Threshold quantity: 100Mi, available: 42Mi"), so the
printing follows Quantity.String(): BinarySI folds into the largest exact power of 1024 (below 1024 it prints plain),
DecimalSI into the largest exact power of 1000. nodeagent's node status prints its capacity with these too (one
implementation of Quantity.String()). The package does not parse quantities (that parser belongs to nodeagent's
config, which eviction must not import); pod requests and limits arrive as `Quantity` values that carry both the
number and the text the API gave, the way a Go Quantity carries its format.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_DECIMAL_SUFFIXES = ("", "k", "M", "G", "T", "P", "E")
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def format_decimal(value: int) -> str:
    """DecimalSI: 110 -> "110", 12000 -> "12k" (trailing zeros fold into the largest exact suffix)."""
    if value == 0:
        return "0"
    index = 0
    while value % 1000 == 0 and index < len(_DECIMAL_SUFFIXES) - 1:
        value //= 1000
        index += 1
    return f"{value}{_DECIMAL_SUFFIXES[index]}"


def format_binary(value: int) -> str:
    """BinarySI: 44040192 -> "42Mi", 25142489088 -> "24553212Ki", 1500 -> "1500"; below 1024 the decimal form, as
    Quantity does."""
    if -1024 < value < 1024:
        return format_decimal(value)
    index = 0
    while value % 1024 == 0 and index < len(_BINARY_SUFFIXES) - 1:
        value //= 1024
        index += 1
    return f"{value}{_BINARY_SUFFIXES[index]}"


def float32(value: float) -> float:
    """Round to the nearest float32: upstream keeps threshold percentages as float32, and its arithmetic shows."""
    result: float = struct.unpack("f", struct.pack("f", value))[0]
    return result


@dataclass(frozen=True)
class Quantity:
    """A whole amount (bytes, or a count) with the text it prints as ("128Mi"); upstream's zero Quantity prints "0"."""

    value: int = 0
    text: str = "0"

    @classmethod
    def of_bytes(cls, value: int) -> Quantity:
        return cls(value, format_binary(value))

    @classmethod
    def of_count(cls, value: int) -> Quantity:
        return cls(value, format_decimal(value))

    def __str__(self) -> str:
        return self.text

    def plus(self, other: Quantity) -> Quantity:
        """The sum as Go's Quantity.Add leaves it: the format of the left operand (BinarySI when its text has a binary
        suffix), printed canonically ("10Mi" + "10Mi" -> "20Mi", "1G" + "10Mi" -> "1010485760")."""
        total = self.value + other.value
        return Quantity(total, format_binary(total) if self.text.endswith("i") else format_decimal(total))


ZERO = Quantity()
