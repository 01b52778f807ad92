"""Quantities printed as the apiserver prints them (resource.Quantity's canonical form)."""

from __future__ import annotations

from datetime import UTC, datetime

_DECIMAL_SUFFIXES = ("", "k", "M", "G", "T", "P", "E")
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def format_decimal(value: int) -> str:
    """DecimalSI: 110 -> "110", 2000 -> "2k" (trailing zeros fold into the largest exact suffix)."""
    if value == 0:
        return "0"
    index = 0
    while value % 1000 == 0 and index < len(_DECIMAL_SUFFIXES) - 1:
        value //= 1000
        index += 1
    return f"{value}{_DECIMAL_SUFFIXES[index]}"


def format_binary(value: int) -> str:
    """BinarySI: 16777216 -> "16Mi", 25142489088 -> "24553212Ki"; below 1024 the decimal form, as Quantity does."""
    if -1024 < value < 1024:
        return format_decimal(value)
    index = 0
    while value % 1024 == 0 and index < len(_BINARY_SUFFIXES) - 1:
        value //= 1024
        index += 1
    return f"{value}{_BINARY_SUFFIXES[index]}"


def format_millicores(millis: int) -> str:
    """cpu: whole cores print as cores ("2"), the rest in millicores ("1900m")."""
    if millis % 1000 == 0:
        return format_decimal(millis // 1000)
    return f"{millis}m"


def _utc(moment: datetime) -> datetime:
    return (moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)).astimezone(UTC)


def format_time(moment: datetime) -> str:
    """metav1.Time: RFC 3339, whole seconds."""
    return _utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime) -> str:
    """metav1.MicroTime: RFC 3339 with microseconds ("2006-01-02T15:04:05.000000Z")."""
    return _utc(moment).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
