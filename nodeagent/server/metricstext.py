"""/metrics and /metrics/probes as Prometheus text (format 0.0.4), from the agent's prometheus_client registries.

A scrape reads the registry as it is now (`registry.collect()`: every value current, nothing kept between
scrapes) and writes the same text as prometheus_client's `generate_latest`, with one difference that upstream asks
for: no `<name>_created` gauges. prometheus_client adds one per counter and histogram child (a tenth of the lines of
the agent's /metrics); upstream's Go client never writes created timestamps in the text format, so a kubelet's
/metrics has none.

Why not `generate_latest` itself: under the kubelet API load benchmark (issue 34) /metrics took a fifth of the agent's
event loop, half of it in `generate_latest`'s own per-line work (every metric and label name checked against the
legacy character set and escaped, the label value escaped through three generic calls, the value through
`floatToGoString`), all on the loop that also runs the pod workers. Here a name is checked once per scrape, a label
value is escaped only when it holds a character to escape, and the value is formatted inline.
"""

from __future__ import annotations

import math

from prometheus_client.openmetrics.exposition import escape_label_name, escape_metric_name
from prometheus_client.registry import Collector

# generate_latest's conversions of OpenMetrics types to the text format's (a counter's family is <name>_total).
_TYPES = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram", "unknown": "untyped"}
_SUFFIXES = {"counter": "_total", "info": "_info"}
# OpenMetrics-only samples that generate_latest moves to gauges of their own after the family.
_MOVED = ("_gsum", "_gcount")
_CREATED = "_created"
_INF = math.inf


def go_value(value: float) -> str:
    """prometheus_client's floatToGoString: Python's repr, an exponent where Go would write one for large positive
    values, and +Inf, -Inf, NaN."""
    d = float(value)
    if d == _INF:
        return "+Inf"
    if d == -_INF:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def _label_value(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def render(registry: Collector) -> bytes:
    """The registry's current samples as text, family by family in collection order."""
    out: list[str] = []
    append = out.append
    metric_names: dict[str, str] = {}
    label_names: dict[str, str] = {}

    def metric_name(name: str) -> str:
        escaped = metric_names.get(name)
        if escaped is None:
            escaped = metric_names[name] = escape_metric_name(name)
        return escaped

    def labels_of(labels: dict[str, str]) -> str:
        if not labels:
            return ""
        parts = []
        for key, value in sorted(labels.items()):
            name = label_names.get(key)
            if name is None:
                name = label_names[key] = escape_label_name(key)
            parts.append(f'{name}="{_label_value(value)}"')
        return "{" + ",".join(parts) + "}"

    for metric in registry.collect():
        family = metric_name(metric.name + _SUFFIXES.get(metric.type, ""))
        kind = _TYPES.get(metric.type, metric.type)
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        append(f"# HELP {family} {doc}\n# TYPE {family} {kind}\n")
        created = metric.name + _CREATED
        moved: dict[str, list[str]] = {}
        for sample in metric.samples:
            name = sample.name
            if name == created:
                continue
            line = f"{metric_name(name)}{labels_of(sample.labels)} {go_value(sample.value)}"
            if sample.timestamp is not None:
                line += f" {int(float(sample.timestamp) * 1000):d}"
            line += "\n"
            suffix = name[len(metric.name) :] if name.startswith(metric.name) else ""
            if suffix in _MOVED:
                moved.setdefault(suffix, []).append(line)
            else:
                append(line)
        for suffix, lines in sorted(moved.items()):
            gauge = metric_name(metric.name + suffix)
            append(f"# HELP {gauge} {doc}\n# TYPE {gauge} gauge\n")
            out.extend(lines)
    return "".join(out).encode("utf-8")
