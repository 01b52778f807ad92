"""What every benchmark shares: the percentile they quote, and the one-container pod they start."""

from __future__ import annotations

from typing import Any

NS = "default"


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank q-quantile (0 <= q <= 1); NaN for no values."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def pod_body(name: str, image: str, *, bench: str) -> dict[str, Any]:
    """A busybox pod that sleeps, labelled bench=<bench> so a benchmark finds and deletes only its own pods."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"bench": bench}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "containers": [
                {"name": "main", "image": image, "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"]}
            ],
        },
    }
