"""Quantities printed as the apiserver prints them (resource.Quantity's canonical form), and metav1 times.

The DecimalSI and BinarySI printing is eviction's (eviction.quantity), which the eviction messages use too: one
implementation of Quantity.String(), re-exported here for the node status.
"""

from __future__ import annotations

from datetime import UTC, datetime

from eviction.quantity import format_binary, format_decimal

__all__ = ["format_binary", "format_decimal", "format_micro_time", "format_millicores", "format_time"]


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
