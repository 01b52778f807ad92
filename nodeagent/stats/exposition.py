"""The Prometheus text format (0.0.4) as the Go client writes it, for the metrics built from stats at scrape time.

prometheus_client's registry cannot carry a sample's timestamp nor a counter named without `_total` added, and
upstream's resource and cAdvisor metrics have both. So these families are written here, the way Go's expfmt does:
families by name, samples by their label values, labels by name, values as strconv.FormatFloat(v, 'g', -1, 64)
(6.7489792e+07), timestamps in milliseconds.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal


def go_float(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 64): the shortest digits that read back as `value`, in exponent form
    when the decimal exponent is below -4 or at least 6 (Go's threshold for the shortest representation)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign, digits_tuple, exponent = Decimal(repr(value)).as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(str(d) for d in digits_tuple).rstrip("0") or "0"
    # repr may write trailing zeros ("100.0"): the decimal point position comes from the untrimmed digits
    point = len(digits_tuple) + exponent  # digits before the decimal point
    head = "-" if sign else ""
    exp = point - 1
    if exp < -4 or exp >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{head}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if point <= 0:
        return f"{head}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{head}{digits}{'0' * (point - len(digits))}"
    return f"{head}{digits[:point]}.{digits[point:]}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


@dataclass(frozen=True, slots=True)
class Sample:
    labels: tuple[tuple[str, str], ...]
    value: float
    timestamp: datetime.datetime | None = None

    @staticmethod
    def of(value: float, timestamp: datetime.datetime | None = None, /, **labels: str) -> Sample:
        return Sample(tuple(sorted(labels.items())), value, timestamp)


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    help: str
    type: str  # counter | gauge
    samples: Sequence[Sample]


def _sample_line(name: str, sample: Sample) -> str:
    labels = ""
    if sample.labels:
        labels = "{" + ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(sample.labels)) + "}"
    line = f"{name}{labels} {go_float(sample.value)}"
    if sample.timestamp is not None:
        line += f" {int(sample.timestamp.timestamp() * 1000)}"
    return line


def render(families: Iterable[Family]) -> str:
    """The families as text; a family without samples is left out, as the Go gatherer does."""
    out: list[str] = []
    for family in sorted(families, key=lambda f: f.name):
        if not family.samples:
            continue
        out.append(f"# HELP {family.name} {_escape_help(family.help)}")
        out.append(f"# TYPE {family.name} {family.type}")
        for sample in sorted(family.samples, key=lambda s: [v for _, v in sorted(s.labels)]):
            out.append(_sample_line(family.name, sample))
    return "\n".join(out) + "\n" if out else ""
