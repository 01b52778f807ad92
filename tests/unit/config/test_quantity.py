"""Resource quantities parse to exact values, as apimachinery's resource.ParseQuantity reads them."""

from __future__ import annotations

from decimal import Decimal

import pytest

from nodeagent.config import QuantityError, parse_percentage, parse_quantity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1Ki", Decimal(1024)),
        ("1k", Decimal(1000)),
        ("500m", Decimal("0.5")),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("1e+3", Decimal(1000)),
        ("1e-3", Decimal("0.001")),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("1Mi", Decimal(2**20)),
        ("1Gi", Decimal(2**30)),
        ("1Ti", Decimal(2**40)),
        ("1Pi", Decimal(2**50)),
        ("8Ei", Decimal(8 * 2**60)),
        ("1M", Decimal(10**6)),
        ("1G", Decimal(10**9)),
        ("1T", Decimal(10**12)),
        ("1P", Decimal(10**15)),
        ("1E", Decimal(10**18)),  # a lone E is exa, not an exponent
        ("100n", Decimal("1E-7")),
        ("1u", Decimal("0.000001")),
        ("100", Decimal(100)),
        ("0", Decimal(0)),
        ("-1", Decimal(-1)),
        ("+1", Decimal(1)),
        ("-100Mi", Decimal(-100 * 2**20)),
        (".5", Decimal("0.5")),
        ("5.", Decimal(5)),
        ("0.1", Decimal("0.1")),
        ("100Mi", Decimal(104857600)),
        ("123456789012345678901234567890Ki", Decimal(123456789012345678901234567890 * 1024)),
    ],
)
def test_parse_quantity(text: str, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


def test_values_are_exact() -> None:
    assert parse_quantity("0.1") + parse_quantity("0.2") == parse_quantity("0.3")
    assert parse_quantity("1.1Gi") == Decimal(11) * 2**30 / 10
    assert str(parse_quantity("1Ki")) == "1024"
    assert str(parse_quantity("500m")) == "0.5"


@pytest.mark.parametrize(
    "text",
    [
        "1.2.3",
        "Mi",
        "10Xi",
        "",
        " 1",
        "1 ",
        "1K",  # kilo is a lowercase k
        "1ki",
        "1mi",
        "1e",
        "1e3Mi",
        "1Mi3",
        "--1",
        "1%",
        "abc",
        "0x10",
        "1_000",
        ".",
        "e3",
    ],
)
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(QuantityError, match="invalid quantity"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10%", Decimal("0.1")),
        ("0%", Decimal(0)),
        ("100%", Decimal(1)),
        ("0.5%", Decimal("0.005")),
        ("-5%", Decimal("-0.05")),
    ],
)
def test_parse_percentage(text: str, expected: Decimal) -> None:
    assert parse_percentage(text) == expected


@pytest.mark.parametrize("text", ["%", "10", "abc%", "10%%", "1.2.3%", "10 %", "inf%", "nan%"])
def test_parse_percentage_rejects(text: str) -> None:
    with pytest.raises(QuantityError, match="invalid percentage"):
        parse_percentage(text)
